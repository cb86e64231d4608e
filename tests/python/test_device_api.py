"""torch.rbln's device API, torch.accelerator and the generated tensor/module methods."""
import pytest
import torch

DEVICES = [0, 1]  # the suite runs with at least two devices


def test_availability_and_count(configured):
    assert torch.rbln.is_available()
    assert torch.rbln.device_count() == configured["count"] >= 2


def test_set_device_changes_where_factories_allocate():
    assert torch.rbln.current_device() == 0
    torch.rbln.set_device(1)
    assert torch.rbln.current_device() == 1
    assert torch.empty(2, device="rbln").device == torch.device("rbln", 1)
    torch.rbln.set_device("rbln:0")
    assert torch.rbln.current_device() == 0
    assert torch.empty(2, device="rbln").device == torch.device("rbln", 0)


def test_device_context_nests_and_restores():
    with torch.rbln.device(1):
        assert torch.rbln.current_device() == 1
        with torch.rbln.device("rbln:0"):
            assert torch.rbln.current_device() == 0
        assert torch.rbln.current_device() == 1
        assert torch.ones(1, device="rbln").device.index == 1
    assert torch.rbln.current_device() == 0


def test_device_context_restores_after_exception():
    with pytest.raises(KeyError):
        with torch.rbln.device(1):
            raise KeyError
    assert torch.rbln.current_device() == 0


def test_device_of_follows_the_tensor():
    t = torch.ones(1, device="rbln:1")
    with torch.rbln.device_of(t):
        assert torch.rbln.current_device() == 1
    assert torch.rbln.current_device() == 0


def test_ops_on_other_device_run_there(cpu_rand):
    a, b = cpu_rand(5, 7), cpu_rand(7, 3)
    out = a.to("rbln:1") @ b.to("rbln:1") + 1
    assert out.device == torch.device("rbln", 1)
    assert torch.rbln.current_device() == 0
    torch.testing.assert_close(out.cpu(), a @ b + 1)


@pytest.mark.parametrize("device, index", [(None, 0), (0, 0), (1, 1), ("rbln:1", 1), (torch.device("rbln", 0), 0)])
def test_synchronize_waits_for_queued_work(device, index, square, busy):
    d = busy(square.to(f"rbln:{index}"))
    torch.rbln.synchronize(device)
    assert torch.rbln.current_stream(index).query()
    torch.testing.assert_close(d.cpu(), busy(square), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("index", DEVICES)
def test_device_properties(index, configured):
    props = torch.rbln.get_device_properties(index)
    assert props.index == index
    assert props.name == torch.rbln.get_device_name(index)
    assert "RBLN" in props.name
    assert props.total_memory == configured["capacity"]
    assert torch.rbln.mem_get_info(index)[1] == configured["capacity"]


def test_tensor_methods(cpu_rand):
    x = cpu_rand(3, 4)
    assert not x.is_rbln
    d = x.rbln()
    assert d.is_rbln and d.device == torch.device("rbln", 0)
    assert x.rbln(1).device == torch.device("rbln", 1)
    assert torch.equal(d.cpu(), x)


@pytest.mark.parametrize("target", ["rbln:1", torch.device("rbln", 1), 1])
def test_to_lands_on_requested_device(target, cpu_rand):
    x = cpu_rand(4)
    d = x.rbln(target) if isinstance(target, int) else x.to(target)
    assert d.device == torch.device("rbln", 1)
    assert torch.equal(d.cpu(), x)


def test_module_rbln_moves_parameters_and_buffers(cpu_rand):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).eval()
    x = cpu_rand(5, 4)
    expected = model(x)
    model.rbln()
    assert {p.device for p in model.parameters()} == {torch.device("rbln", 0)}
    assert {b.device for b in model.buffers()} == {torch.device("rbln", 0)}
    with torch.no_grad():
        torch.testing.assert_close(model(x.rbln()).cpu(), expected.detach())


def test_device_context_makes_factories_allocate_on_rbln():
    with torch.device("rbln"):
        z, a, f = torch.zeros(2, 3), torch.arange(5), torch.full((2,), 7.5)
    for t in (z, a, f):
        assert t.device == torch.device("rbln", 0)
    assert torch.equal(z.cpu(), torch.zeros(2, 3))
    assert torch.equal(a.cpu(), torch.arange(5))
    assert torch.equal(f.cpu(), torch.full((2,), 7.5))


def test_accelerator_reports_rbln():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("rbln")
    assert torch.accelerator.device_count() == torch.rbln.device_count()


def test_accelerator_drives_the_current_device():
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1 == torch.rbln.current_device()
    assert torch.empty(1, device="rbln").device.index == 1
    torch.accelerator.set_device_index(0)
    assert torch.rbln.current_device() == 0


def test_accelerator_synchronize_and_stream(square, busy):
    d = busy(square.rbln())
    torch.accelerator.synchronize()
    assert torch.rbln.current_stream().query()
    torch.testing.assert_close(d.cpu(), busy(square), rtol=1e-4, atol=1e-5)
    assert torch.accelerator.current_stream() == torch.rbln.current_stream()


def test_amp_supported_dtypes():
    assert torch.rbln.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_autocast_runs_matmul_in_lower_precision(dtype, cpu_rand):
    a, b = cpu_rand(8, 16), cpu_rand(16, 4)
    with torch.autocast("rbln", dtype=dtype):
        out = a.rbln() @ b.rbln()
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu(), (a.to(dtype) @ b.to(dtype)), rtol=2e-2, atol=1e-1)


def test_environment_configures_devices(run_python):
    out = run_python(
        """
        import torch
        held = [torch.ones(1, device=f"rbln:{i}") for i in range(torch.rbln.device_count())]
        print(json.dumps({
            "count": torch.rbln.device_count(),
            "accel_count": torch.accelerator.device_count(),
            "total": [torch.rbln.get_device_properties(i).total_memory for i in range(3)],
            "mem_info_total": torch.rbln.mem_get_info(2)[1],
            "last": str(held[-1].device),
        }))
        """,
        RBLN_DEVICE_COUNT="3", RBLN_DEVICE_MEMORY="64M")
    assert out == {"count": 3, "accel_count": 3, "total": [64 << 20] * 3, "mem_info_total": 64 << 20,
                   "last": "rbln:2"}


@pytest.mark.parametrize("env, message", [
    ({"RBLN_DEVICE_COUNT": "two"}, "RBLN_DEVICE_COUNT='two' is not a non-negative integer"),
    ({"RBLN_DEVICE_MEMORY": "lots"}, "RBLN_DEVICE_MEMORY='lots' is not a positive byte count"),
], ids=["count", "memory"])
def test_invalid_environment_is_reported(env, message, run_python):
    out = run_python(
        """
        try:
            torch.empty(1, device="rbln")
            error = None
        except RuntimeError as e:
            error = str(e)
        print(json.dumps({"available": torch.rbln.is_available(), "error": error}))
        """,
        **env)
    assert out["error"] is not None and message in out["error"]
    assert out["available"] == ("RBLN_DEVICE_COUNT" not in env)
