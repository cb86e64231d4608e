"""torch.save / torch.load of rbln tensors and modules."""
import pytest
import torch


@pytest.fixture
def saved(tmp_path, cpu_rand):
    """A checkpoint of rbln data on both devices, and the CPU values it holds."""
    model = torch.nn.Linear(4, 3)
    values = {"x": cpu_rand(3, 5), "x1": cpu_rand(2, 2), "i": torch.arange(6).view(2, 3)}
    expected_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.rbln()
    path = tmp_path / "ckpt.pt"
    torch.save({"x": values["x"].rbln(), "x1": values["x1"].to("rbln:1"), "i_t": values["i"].rbln().t(),
                "state": model.state_dict()}, path)
    return path, values, expected_state


def _check(loaded, values, expected_state, devices):
    assert loaded["x"].device == devices[0] and torch.equal(loaded["x"].cpu(), values["x"])
    assert loaded["x1"].device == devices[1] and torch.equal(loaded["x1"].cpu(), values["x1"])
    assert loaded["i_t"].device == devices[0] and torch.equal(loaded["i_t"].cpu(), values["i"].t())
    assert loaded["i_t"].stride() == values["i"].t().stride()
    assert loaded["state"].keys() == expected_state.keys()
    for k, v in expected_state.items():
        assert loaded["state"][k].device == devices[0]
        assert torch.equal(loaded["state"][k].cpu(), v)


RBLN0, RBLN1, CPU = torch.device("rbln", 0), torch.device("rbln", 1), torch.device("cpu")


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("map_location, devices", [
    (None, (RBLN0, RBLN1)),
    ("rbln", (RBLN0, RBLN0)),
    ("cpu", (CPU, CPU)),
    ({"rbln:1": "rbln:0"}, (RBLN0, RBLN0)),
], ids=["saved-devices", "rbln", "cpu", "remap"])
def test_round_trip(saved, map_location, devices, weights_only):
    path, values, expected_state = saved
    loaded = torch.load(path, map_location=map_location, weights_only=weights_only)
    _check(loaded, values, expected_state, devices)


def test_loaded_state_dict_drives_an_rbln_module(saved, cpu_rand):
    path, _, expected_state = saved
    model = torch.nn.Linear(4, 3).rbln()
    model.load_state_dict(torch.load(path, map_location="rbln", weights_only=True)["state"])
    reference = torch.nn.Linear(4, 3)
    reference.load_state_dict(expected_state)
    x = cpu_rand(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(model(x.rbln()).cpu(), reference(x))


def test_cpu_checkpoint_loads_onto_rbln(tmp_path, cpu_rand):
    x = cpu_rand(4, 4)
    torch.save(x, tmp_path / "cpu.pt")
    loaded = torch.load(tmp_path / "cpu.pt", map_location="rbln:1", weights_only=True)
    assert loaded.device == RBLN1 and torch.equal(loaded.cpu(), x)
