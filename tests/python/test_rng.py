"""torch.rbln's random number API and rbln generators."""
import pytest
import torch


def test_manual_seed_and_initial_seed():
    torch.rbln.manual_seed(1234)
    assert torch.rbln.initial_seed() == 1234
    torch.rbln.manual_seed(-1)  # wraps like torch.cuda: 2**64 - 1
    assert torch.rbln.initial_seed() == 2**64 - 1


def test_rng_state_round_trip():
    torch.rbln.manual_seed(42)
    state = torch.rbln.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,) and state.device.type == "cpu"
    torch.rbln.manual_seed(7)
    assert not torch.equal(torch.rbln.get_rng_state(), state)
    torch.rbln.set_rng_state(state)
    assert torch.rbln.initial_seed() == 42
    assert torch.equal(torch.rbln.get_rng_state(), state)


def test_rng_state_is_per_device():
    torch.rbln.manual_seed(5)
    torch.rbln.set_rng_state(torch.rbln.get_rng_state(0), device=1)
    with torch.rbln.device(1):
        torch.rbln.manual_seed(6)
    assert torch.rbln.initial_seed() == 5
    assert not torch.equal(torch.rbln.get_rng_state(0), torch.rbln.get_rng_state(1))


def test_set_rng_state_rejects_wrong_size():
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.rbln.set_rng_state(torch.zeros(8, dtype=torch.uint8))


def test_manual_seed_all_and_state_all():
    torch.rbln.manual_seed_all(99)
    states = torch.rbln.get_rng_state_all()
    assert len(states) == torch.rbln.device_count()
    assert all(torch.equal(s, states[0]) for s in states)
    for i in range(torch.rbln.device_count()):
        with torch.rbln.device(i):
            assert torch.rbln.initial_seed() == 99


def test_seed_changes_initial_seed():
    torch.rbln.manual_seed(3)
    torch.rbln.seed()
    first = torch.rbln.initial_seed()
    torch.rbln.seed()
    assert first != 3 and torch.rbln.initial_seed() not in (3, first)


def test_torch_manual_seed_seeds_rbln():
    torch.manual_seed(2024)
    for i in range(torch.rbln.device_count()):
        with torch.rbln.device(i):
            assert torch.rbln.initial_seed() == 2024


def test_rbln_generator():
    g = torch.Generator(device="rbln")
    assert g.device == torch.device("rbln", 0)
    assert torch.Generator(device="rbln:1").device == torch.device("rbln", 1)
    g.manual_seed(11)
    assert g.initial_seed() == 11
    state = g.get_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    g.seed()
    assert g.initial_seed() != 11
    g.set_state(state)
    assert g.initial_seed() == 11
    assert torch.equal(g.get_state(), state)


def test_rbln_manual_seed_makes_device_sampling_reproducible():
    draws = []
    for _ in range(2):
        torch.rbln.manual_seed(0)
        draws.append(torch.randn(64, device="rbln").cpu())
    assert torch.equal(draws[0], draws[1])


def test_sampling_with_an_rbln_generator():
    g = torch.Generator(device="rbln")
    draws = []
    for _ in range(2):
        g.manual_seed(0)
        draws.append(torch.rand(64, device="rbln", generator=g))
    assert draws[0].device == torch.device("rbln", 0)
    assert torch.equal(draws[0].cpu(), draws[1].cpu())
    assert ((draws[0] >= 0) & (draws[0] < 1)).all().item()
