"""User errors match the CPU's, asynchronous kernel errors surface at the next sync, and the device survives."""
import pytest
import torch


def _error(fn, device):
    try:
        fn(device)
    except Exception as e:  # noqa: BLE001  (the type is part of what is compared)
        return type(e), str(e).split("\n")[0]
    return None


SHAPE_ERRORS = {
    "mm": lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(2, 3, device=d)),
    "bmm": lambda d: torch.bmm(torch.ones(2, 2, 3, device=d), torch.ones(2, 2, 3, device=d)),
    "add": lambda d: torch.ones(3, device=d) + torch.ones(4, device=d),
    "view": lambda d: torch.ones(6, device=d).view(4),
    "cat": lambda d: torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)]),
    "copy_": lambda d: torch.zeros(4, 6, device=d).copy_(torch.ones(3, device=d)),
    "dim": lambda d: torch.ones(2, 3, device=d).sum(5),
}


@pytest.mark.parametrize("name", SHAPE_ERRORS)
def test_shape_errors_match_cpu(name, assert_device_works):
    fn = SHAPE_ERRORS[name]
    expected = _error(fn, "cpu")
    assert expected is not None
    assert _error(fn, "rbln") == expected
    assert_device_works()


@pytest.mark.parametrize("a, b", [("cpu", "rbln:0"), ("rbln:0", "cpu"), ("rbln:0", "rbln:1")])
def test_mixed_devices_are_rejected(a, b, assert_device_works):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device=a) + torch.ones(3, device=b)
    assert_device_works("rbln:0")
    assert_device_works("rbln:1")


def test_zero_dim_cpu_tensor_mixes_like_a_scalar():
    out = torch.tensor(2.5) * torch.arange(4.0, device="rbln")
    assert out.device == torch.device("rbln", 0)
    assert torch.equal(out.cpu(), torch.arange(4.0) * 2.5)


@pytest.mark.parametrize("call", [
    lambda: torch.empty(1, device="rbln:7"),
    lambda: torch.ones(2).to("rbln:7"),
    lambda: torch.ones(2).rbln(7),
    lambda: torch.rbln.set_device(7),
    lambda: torch.rbln.get_device_properties(7),
    lambda: torch.rbln.Stream(device=7),
], ids=["empty", "to", "rbln()", "set_device", "properties", "Stream"])
def test_invalid_device_index_is_named(call, assert_device_works):
    with pytest.raises((RuntimeError, ValueError), match="rbln:7"):
        call()
    assert torch.rbln.current_device() == 0
    assert_device_works()


@pytest.fixture
def out_of_range_select():
    x = torch.arange(12.0).view(4, 3).rbln()
    bad = torch.tensor([0, 7]).rbln()
    return x, lambda: torch.index_select(x, 0, bad)


@pytest.mark.parametrize("sync", ["synchronize", "cpu", "item"])
def test_kernel_error_surfaces_at_next_sync(sync, out_of_range_select, assert_device_works):
    x, select = out_of_range_select
    y = select()  # queued: the bad index is only seen when the kernel runs
    with pytest.raises(IndexError, match="aten::index_select") as info:  # IndexError, as CPU's
        if sync == "synchronize":
            torch.rbln.synchronize()
        elif sync == "cpu":
            y.cpu()
        else:
            y.sum().item()
    assert "index out of range" in str(info.value)
    torch.rbln.synchronize()  # the error was reported once; the stream is usable again
    assert torch.equal(x.cpu(), torch.arange(12.0).view(4, 3))
    assert_device_works()


def test_kernel_error_on_side_stream_surfaces_at_its_sync(out_of_range_select, assert_device_works):
    _, select = out_of_range_select
    s = torch.rbln.Stream()
    with torch.rbln.stream(s):
        select()
    with pytest.raises(IndexError, match="aten::index_select"):
        s.synchronize()
    assert s.query()
    assert_device_works()


def test_launch_blocking_raises_at_the_call(run_python):
    out = run_python(
        """
        x = torch.arange(12.0).view(4, 3).rbln()
        bad = torch.tensor([0, 7]).rbln()
        try:
            torch.index_select(x, 0, bad)
            error = None
        except IndexError as e:
            error = str(e)
        torch.rbln.synchronize()
        good = torch.index_select(x, 0, torch.tensor([3, 1]).rbln()).cpu().tolist()
        print(json.dumps({"error": error, "good": good}))
        """,
        RBLN_LAUNCH_BLOCKING="1")
    assert out["error"] is not None and "aten::index_select" in out["error"]
    assert out["good"] == [[9.0, 10.0, 11.0], [3.0, 4.0, 5.0]]


def test_integer_to_negative_integer_power_raises_like_cpu(assert_device_works):
    x = torch.tensor([2, -3]).rbln()
    for f in (lambda: x ** -2, lambda: torch.pow(x, -1), lambda: x.clone().pow_(-3)):
        with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
            f()
    torch.testing.assert_close((x ** 2).cpu(), torch.tensor([4, 9]))
    torch.testing.assert_close(torch.pow(2, -x.abs()).cpu(), torch.pow(2, -torch.tensor([2, 3])))
    assert_device_works()
