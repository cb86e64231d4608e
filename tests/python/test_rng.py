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


# ---- distributions on the device -------------------------------------------------------
# Each sampler draws ~1e6 values on rbln and checks its range, mean and variance against the
# distribution's, within 6 standard errors (so a correct sampler fails about once in 5e8 runs),
# plus, in float16/bfloat16, the most that rounding each value to the dtype can move the
# statistic (eps * E|X| for the mean, 2 * eps * E[X^2] for the variance). It must run on the
# device (explain() lists the op, nothing falls back).
import math  # noqa: E402

import torch.nn.functional as F  # noqa: E402

N = 1 << 20
SIGMAS = 6.0
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


def _on_device(fn, *ops):
    """fn() on rbln; asserts each op in `ops` ran on the device and nothing fell back."""
    with torch.rbln.explain() as ex:
        out = fn()
        torch.rbln.synchronize()
    assert not ex.fallback_ops, ex.fallback_reasons
    for op in ops:
        assert op in ex.device_ops, f"{op} did not run on the device: {sorted(ex.device_ops)}"
    assert out.device.type == "rbln"
    return out


def _check_moments(x, dtype, mean, var, mu4, abs_mean):
    """x's sample mean and variance against a distribution's mean, variance and fourth central
    moment (the standard error of a sample variance is sqrt((mu4 - var^2) / n))."""
    assert x.dtype == dtype
    x = x.cpu().double().flatten()
    n = x.numel()
    eps = 0.0 if dtype == torch.float32 else torch.finfo(dtype).eps
    mean_tol = SIGMAS * math.sqrt(var / n) + eps * abs_mean
    var_tol = SIGMAS * math.sqrt((mu4 - var * var) / n) + 2 * eps * (var + mean * mean)
    assert abs(x.mean().item() - mean) <= mean_tol, (x.mean().item(), mean, mean_tol)
    assert abs(x.var().item() - var) <= var_tol, (x.var().item(), var, var_tol)


def _uniform_moments(a, b):
    w = b - a
    return {"mean": (a + b) / 2, "var": w * w / 12, "mu4": w**4 / 80, "abs_mean": max(abs(a), abs(b))}


@pytest.mark.parametrize("dtype", FLOATS)
def test_rand_statistics(dtype):
    x = _on_device(lambda: torch.rand(N, device="rbln", dtype=dtype), "aten::uniform_")
    assert x.min().item() >= 0 and x.max().item() <= 1
    _check_moments(x, dtype, **_uniform_moments(0.0, 1.0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_with_bounds_statistics(dtype):
    x = _on_device(lambda: torch.empty(N, device="rbln", dtype=dtype).uniform_(-3, 5), "aten::uniform_")
    assert x.min().item() >= -3 and x.max().item() <= 5
    _check_moments(x, dtype, **_uniform_moments(-3.0, 5.0))
    # Not stuck near the ends: a tenth of the range at each end holds a tenth of the draws.
    xd = x.cpu().double()
    for frac in ((xd < -2.2).double().mean().item(), (xd >= 4.2).double().mean().item()):
        assert abs(frac - 0.1) <= SIGMAS * math.sqrt(0.1 * 0.9 / N) + 0.01 * (dtype != torch.float32)


@pytest.mark.parametrize("dtype", [
    torch.float32,
    torch.bfloat16,
    torch.float16,
])
def test_uniform_excludes_upper_bound(dtype):
    """torch.rand draws from [0, 1) and uniform_(a, b) from [a, b), in every dtype (CPU: never 1.0)."""
    x = torch.rand(4 * N, device="rbln", dtype=dtype).cpu()
    y = torch.empty(4 * N, device="rbln", dtype=dtype).uniform_(-3, 5).cpu()
    assert x.min().item() >= 0 and x.max().item() < 1
    assert y.min().item() >= -3 and y.max().item() < 5


@pytest.mark.parametrize("dtype", FLOATS)
def test_randn_statistics(dtype):
    x = _on_device(lambda: torch.randn(N, device="rbln", dtype=dtype), "aten::normal_")
    _check_moments(x, dtype, mean=0.0, var=1.0, mu4=3.0, abs_mean=math.sqrt(2 / math.pi))
    # Tails: P(|X| > 1.96) = 0.05.
    tail = (x.cpu().double().abs() > 1.96).double().mean().item()
    assert abs(tail - 0.05) <= SIGMAS * math.sqrt(0.05 * 0.95 / N) + 0.01 * (dtype != torch.float32)


@pytest.mark.parametrize("dtype", FLOATS)
def test_normal_with_mean_and_std_statistics(dtype):
    x = _on_device(lambda: torch.empty(N, device="rbln", dtype=dtype).normal_(2.0, 3.0), "aten::normal_")
    _check_moments(x, dtype, mean=2.0, var=9.0, mu4=3 * 81.0, abs_mean=2.0 + 3.0)
    y = _on_device(lambda: torch.normal(-1.0, 0.5, (N,), device="rbln", dtype=dtype), "aten::normal_")
    _check_moments(y, dtype, mean=-1.0, var=0.25, mu4=3 * 0.0625, abs_mean=1.5)


@pytest.mark.parametrize("dtype", FLOATS)
def test_exponential_statistics(dtype):
    lam = 2.0
    x = _on_device(lambda: torch.empty(N, device="rbln", dtype=dtype).exponential_(lam), "aten::exponential_")
    xd = x.cpu().double()
    assert xd.min().item() >= 0 and torch.isfinite(xd).all()
    _check_moments(x, dtype, mean=1 / lam, var=1 / lam**2, mu4=9 / lam**4, abs_mean=1 / lam)
    # P(X > 1) = exp(-lambda).
    p = math.exp(-lam)
    assert abs((xd > 1).double().mean().item() - p) <= SIGMAS * math.sqrt(p * (1 - p) / N) + 0.01 * (
        dtype != torch.float32)


@pytest.mark.parametrize("dtype", FLOATS)
def test_bernoulli_scalar_p_statistics(dtype):
    for p in (0.1, 0.5, 0.85):
        x = _on_device(lambda: torch.empty(N, device="rbln", dtype=dtype).bernoulli_(p), "aten::bernoulli_.float")
        xd = x.cpu().double()
        assert set(xd.unique().tolist()) <= {0.0, 1.0}
        assert abs(xd.mean().item() - p) <= SIGMAS * math.sqrt(p * (1 - p) / N)
    y = _on_device(lambda: torch.bernoulli(torch.empty(N, device="rbln", dtype=dtype), 0.25),
                   "aten::bernoulli_.float")  # torch.bernoulli(input, p): a new tensor like input
    assert abs(y.cpu().double().mean().item() - 0.25) <= SIGMAS * math.sqrt(0.25 * 0.75 / N)


def test_bernoulli_tensor_p_statistics():
    """Per-element probabilities: the count of ones and where they fall follow p (through the
    CPU fallback today, see test_bernoulli_tensor_p_runs_on_device)."""
    p = torch.linspace(0, 1, N, dtype=torch.float64)
    x = torch.bernoulli(p.float().to("rbln")).cpu().double()
    assert set(x.unique().tolist()) <= {0.0, 1.0}
    assert x[0].item() == 0 and x[-1].item() == 1  # p = 0 and p = 1 are certain
    sd = math.sqrt((p * (1 - p)).sum().item())
    assert abs(x.sum().item() - p.sum().item()) <= SIGMAS * sd
    low, high = x[: N // 4].mean().item(), x[-N // 4:].mean().item()  # p in [0, .25] and [.75, 1]
    assert abs(low - 0.125) < 0.01 and abs(high - 0.875) < 0.01
    y = torch.empty(N, device="rbln").bernoulli_(torch.full((N,), 0.3, device="rbln")).cpu().double()
    assert abs(y.mean().item() - 0.3) <= SIGMAS * math.sqrt(0.21 / N)


def test_bernoulli_tensor_p_runs_on_device():
    p = torch.full((1000,), 0.3, device="rbln")
    g = torch.Generator(device="rbln").manual_seed(0)
    _on_device(lambda: torch.bernoulli(p, generator=g))
    _on_device(lambda: torch.empty(1000, device="rbln").bernoulli_(p), "aten::bernoulli_.Tensor")


@pytest.mark.parametrize("dtype,low,high", [(torch.int64, -5, 7), (torch.int32, 0, 1000), (torch.float32, 3, 11),
                                            (torch.bfloat16, -4, 4)])
def test_randint_statistics(dtype, low, high):
    x = _on_device(lambda: torch.randint(low, high, (N,), device="rbln", dtype=dtype), "aten::random_.from")
    xd = x.cpu().long()
    assert xd.min().item() >= low and xd.max().item() < high
    assert torch.equal(x.cpu().double(), xd.double())  # integral values in a float dtype too
    k = high - low
    _check_moments(x.cpu().double(), torch.float64, mean=(low + high - 1) / 2, var=(k * k - 1) / 12,
                   mu4=(k * k - 1) * (3 * k * k - 7) / 240, abs_mean=max(abs(low), abs(high)))
    if k <= 16:  # every value about equally often
        counts = torch.bincount(xd - low, minlength=k).double()
        assert (counts - N / k).abs().max().item() <= SIGMAS * math.sqrt(N * (1 / k) * (1 - 1 / k))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.bfloat16])
def test_random_ranges(dtype):
    x = _on_device(lambda: torch.empty(N, device="rbln", dtype=dtype).random_(10), "aten::random_.to").cpu()
    assert x.min().item() == 0 and x.max().item() == 9
    y = _on_device(lambda: torch.empty(N, device="rbln", dtype=dtype).random_(-20, -10), "aten::random_.from").cpu()
    assert y.min().item() == -20 and y.max().item() == -11
    counts = torch.bincount(x.long(), minlength=10).double()
    assert (counts - N / 10).abs().max().item() <= SIGMAS * math.sqrt(N * 0.1 * 0.9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_random_without_bounds_range(dtype):
    """random_() draws from [0, 2**mantissa] for floats and [0, max] for integers, as on CPU
    (through the CPU fallback today, see test_random_without_bounds_runs_on_device)."""
    x = torch.empty(N, device="rbln", dtype=dtype).random_().cpu()
    top = 2**24 if dtype == torch.float32 else torch.iinfo(dtype).max
    assert x.min().item() >= 0 and x.max().item() <= top
    assert x.double().mean().item() > top / 4  # spread over the range, not clustered at 0


def test_random_without_bounds_runs_on_device():
    g = torch.Generator(device="rbln").manual_seed(0)
    _on_device(lambda: torch.empty(100, device="rbln").random_(generator=g), "aten::random_")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [0.3])
def test_dropout_statistics(dtype, p):
    x = torch.randn(N, dtype=dtype)
    d = x.to("rbln")
    out = _on_device(lambda: F.dropout(d, p=p, training=True), "aten::native_dropout").cpu()
    kept = out != 0
    # A fraction p is zeroed; the rest is scaled by 1 / (1 - p), as CPU scales it.
    zeroed = 1 - kept.double().mean().item()
    assert abs(zeroed - p) <= SIGMAS * math.sqrt(p * (1 - p) / N)
    expected = F.dropout(x, p=0.0, training=True) * (1 / (1 - p)) if dtype == torch.float32 else None
    cpu_scale = F.dropout(torch.ones(64, dtype=dtype), p=p, training=True).max()  # CPU's 1/(1-p) in dtype
    ones = F.dropout(torch.ones(N, dtype=dtype, device="rbln"), p=p, training=True).cpu()
    assert set(ones.unique().tolist()) == {0.0, cpu_scale.item()}
    nz = kept & (x != 0)
    torch.testing.assert_close(out[nz], (x[nz].float() * cpu_scale.float()).to(dtype),
                               **({} if dtype == torch.float32 else {"atol": 0, "rtol": 2 * torch.finfo(dtype).eps}))
    if expected is not None:
        torch.testing.assert_close(out[nz], expected[nz])


def test_dropout_edges_and_eval_mode():
    x = torch.randn(1000)
    d = x.to("rbln")
    assert torch.equal(F.dropout(d, p=0.0, training=True).cpu(), x)
    assert torch.equal(F.dropout(d, p=1.0, training=True).cpu(), torch.zeros(1000))
    assert torch.equal(F.dropout(d, p=0.5, training=False).cpu(), x)
    m = torch.nn.Dropout(0.5).to("rbln").eval()
    assert torch.equal(m(d).cpu(), x)


def test_dropout2d_zeroes_whole_channels():
    x = torch.ones(64, 512, 2, 2, device="rbln")
    out = _on_device(lambda: F.dropout2d(x, p=0.25, training=True), "aten::bernoulli_.float").cpu()
    per_channel = out.flatten(2)
    assert ((per_channel == 0).all(-1) | (per_channel == 1 / 0.75).all(-1)).all()
    zeroed = (per_channel == 0).all(-1).double().mean().item()
    n = 64 * 512
    assert abs(zeroed - 0.25) <= SIGMAS * math.sqrt(0.25 * 0.75 / n)


def test_dropout_backward_uses_the_same_mask():
    x = torch.randn(10000, device="rbln", requires_grad=True)
    out = F.dropout(x, p=0.4, training=True)
    (g,) = torch.autograd.grad(out.sum(), x)
    kept = (out != 0).cpu()
    torch.testing.assert_close(g.cpu(), kept.float() / 0.6)


# ---- reproducibility -----------------------------------------------------------------------
SAMPLERS = {
    "rand": lambda gen: torch.rand(4096, device="rbln", generator=gen),
    "randn_bf16": lambda gen: torch.randn(4096, device="rbln", dtype=torch.bfloat16, generator=gen),
    "randint": lambda gen: torch.randint(0, 100, (4096,), device="rbln", generator=gen),
    "uniform_": lambda gen: torch.empty(4096, device="rbln").uniform_(-2, 2, generator=gen),
    "normal_": lambda gen: torch.empty(4096, device="rbln", dtype=torch.float16).normal_(1, 2, generator=gen),
    "bernoulli_": lambda gen: torch.empty(4096, device="rbln").bernoulli_(0.3, generator=gen),
    "exponential_": lambda gen: torch.empty(4096, device="rbln").exponential_(1.5, generator=gen),
    "random_": lambda gen: torch.empty(4096, device="rbln", dtype=torch.int64).random_(0, 1 << 40, generator=gen),
    "dropout": lambda gen: F.dropout(torch.ones(4096, device="rbln"), 0.5, training=True),  # default generator
}
# Samplers whose parameters are tensors or that permute (they once fell back to the CPU and drew
# from the CPU generator): torch.rbln.manual_seed alone must reproduce them.
TENSOR_SAMPLERS = {
    "randperm": lambda: torch.randperm(1000, device="rbln"),
    "multinomial": lambda: torch.multinomial(torch.ones(1000, device="rbln"), 100),
    "multinomial_replacement": lambda: torch.multinomial(torch.ones(1000, device="rbln"), 100, True),
    "bernoulli_tensor_p": lambda: torch.bernoulli(torch.full((1000,), 0.5, device="rbln")),
    "normal_tensor_mean_std": lambda: torch.normal(torch.zeros(1000, device="rbln"), torch.ones(1000, device="rbln")),
    "random_no_bounds": lambda: torch.empty(1000, device="rbln").random_(),
}


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_manual_seed_reproduces(name):
    draw = SAMPLERS[name]
    draws = []
    for seed in (123, 123, 124):
        torch.rbln.manual_seed(seed)
        draws.append(draw(None).cpu())
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], draws[2])


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_rng_state_round_trip_reproduces(name):
    draw = SAMPLERS[name]
    torch.rbln.manual_seed(5)
    draw(None)  # a state in the middle of the stream, not just after seeding
    state = torch.rbln.get_rng_state()
    first = draw(None).cpu()
    second = draw(None).cpu()
    assert not torch.equal(first, second)  # the state advances
    torch.rbln.set_rng_state(state)
    assert torch.equal(draw(None).cpu(), first)
    assert torch.equal(draw(None).cpu(), second)


@pytest.mark.parametrize("name", [n for n in SAMPLERS if n != "dropout"])
def test_generator_reproduces_and_leaves_default_alone(name):
    draw = SAMPLERS[name]
    g = torch.Generator(device="rbln")
    torch.rbln.manual_seed(0)
    default_state = torch.rbln.get_rng_state()
    g.manual_seed(77)
    a = draw(g).cpu()
    state = g.get_state()
    b = draw(g).cpu()
    g.set_state(state)
    assert torch.equal(draw(g).cpu(), b)
    g.manual_seed(77)
    assert torch.equal(draw(g).cpu(), a)
    assert torch.equal(torch.rbln.get_rng_state(), default_state)


@pytest.mark.parametrize("name", TENSOR_SAMPLERS)
def test_tensor_samplers_follow_the_rbln_generator(name):
    draw = TENSOR_SAMPLERS[name]
    torch.manual_seed(0)  # the CPU generator stays put, so only the rbln seed and state can matter
    torch.rbln.manual_seed(9)
    a = draw().cpu()
    torch.manual_seed(1)
    torch.rbln.manual_seed(9)
    assert torch.equal(draw().cpu(), a)


# ---- randperm and multinomial ----------------------------------------------
def test_randperm_is_a_permutation():
    for n in (0, 1, 2, 10, 1000, 100_000):
        for dtype in (torch.int64, torch.int32, torch.float32):
            p = torch.randperm(n, device="rbln", dtype=dtype)
            assert p.device.type == "rbln" and p.dtype == dtype and p.shape == (n,)
            assert torch.equal(p.cpu().sort().values.long(), torch.arange(n))


def test_randperm_is_uniform():
    """Over 4000 permutations of 5, each value lands first about 1/5 of the time, and each
    ordered pair of values is in order half the time."""
    draws = torch.stack([torch.randperm(5, device="rbln") for _ in range(4000)]).cpu()
    counts = torch.bincount(draws[:, 0], minlength=5).double()
    assert (counts - 800).abs().max().item() <= SIGMAS * math.sqrt(4000 * 0.2 * 0.8)
    pos = draws.argsort(1)  # pos[:, v] = where value v is
    in_order = (pos[:, 0] < pos[:, 4]).double().mean().item()
    assert abs(in_order - 0.5) <= SIGMAS * math.sqrt(0.25 / 4000)


def test_randperm_with_rbln_generator():
    g = torch.Generator(device="rbln").manual_seed(3)
    a = torch.randperm(100, device="rbln", generator=g)
    g.manual_seed(3)
    assert torch.equal(torch.randperm(100, device="rbln", generator=g).cpu(), a.cpu())
    assert torch.equal(a.cpu().sort().values, torch.arange(100))


P = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])


def test_multinomial_with_replacement_frequencies():
    n = 400_000
    s = torch.multinomial((P * 7).to("rbln"), n, replacement=True)  # unnormalized weights
    assert s.device.type == "rbln" and s.dtype == torch.int64 and s.shape == (n,)
    counts = torch.bincount(s.cpu(), minlength=5).double()
    assert counts[4].item() == 0  # zero weight, never drawn
    sd = torch.sqrt(n * P * (1 - P))
    assert ((counts - n * P).abs() <= SIGMAS * sd).all(), counts


def test_multinomial_without_replacement():
    rows = 20_000
    probs = P.repeat(rows, 1).to("rbln")
    s = torch.multinomial(probs, 3).cpu()
    assert s.shape == (rows, 3)
    assert (s.sort(1).values.diff(dim=1) > 0).all()  # distinct within a row
    assert (s != 4).all()  # zero weight, never drawn
    first = torch.bincount(s[:, 0], minlength=5).double()  # the first draw follows P
    assert ((first - rows * P).abs() <= SIGMAS * torch.sqrt(rows * P * (1 - P))).all(), first
    # All four categories with weight, drawn without replacement: a permutation of them.
    full = torch.multinomial(probs[:100], 4).cpu()
    assert torch.equal(full.sort(1).values, torch.arange(4).repeat(100, 1))


def test_multinomial_with_replacement_and_rbln_generator():
    g = torch.Generator(device="rbln")
    weights = (P + 0.05).to("rbln")
    g.manual_seed(11)
    a = torch.multinomial(weights, 1000, True, generator=g)
    g.manual_seed(11)
    b = torch.multinomial(weights, 1000, True, generator=g)
    assert a.device.type == "rbln" and torch.equal(a.cpu(), b.cpu())
    assert ((a.cpu() >= 0) & (a.cpu() < 5)).all()


def test_multinomial_without_replacement_and_rbln_generator(run_python):
    """In a subprocess: this once corrupted the heap (a CPU tensor written by the device worker)."""
    out = run_python("""
        P = torch.tensor([0.15, 0.25, 0.35, 0.45, 0.05])
        g = torch.Generator(device="rbln")
        draws = []
        for _ in range(2):
            g.manual_seed(11)
            draws.append(torch.stack([torch.multinomial(P.to("rbln"), 3, generator=g) for _ in range(200)]).cpu())
        print(json.dumps({"same": torch.equal(draws[0], draws[1]), "device": str(draws[0].device),
                          "rows": draws[0].sort(1).values.tolist()}))
    """)
    assert out["same"]
    assert all(len(set(r)) == 3 and all(0 <= v < 5 for v in r) for r in out["rows"])


def test_rbln_generator_with_cpu_tensor_raises(run_python):
    """In a subprocess, keeping the CPU tensor alive until the device is idle, in case a regression
    lets the device worker write it."""
    out = run_python("""
        g = torch.Generator(device="rbln").manual_seed(0)
        x = torch.zeros(16)
        try:
            x.exponential_(generator=g)
            raised = False
        except RuntimeError:
            raised = True
        torch.rbln.synchronize()
        print(json.dumps({"raised": raised, "written": bool((x != 0).any())}))
    """)
    assert out["raised"], f"no error (the CPU tensor was {'written' if out['written'] else 'left alone'})"
