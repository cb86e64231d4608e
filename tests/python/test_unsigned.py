"""The bare unsigned dtypes (uint16, uint32, uint64: registry group `unsigned`) on the device: what CPU computes
for them (copies and conversions, fills, `where`, indexing, concatenation, mul, comparisons, bitwise ops, sums,
products, scans, sorting) runs on rbln with CPU's values and no fallback; what CPU lacks raises CPU's error."""
import re

import pytest
import torch

import torch_rbln  # noqa: F401

UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
MASK = [True, False, True, False, True, True]

OPS = {
    "transposed copy": lambda x: x.view(2, 3).t().contiguous(),
    "to float32": lambda x: x.float(),
    "from float32": lambda x: (x.float() / 2).to(x.dtype),  # in range: out of it the conversion is undefined
    "to int64 and back": lambda x: x.long().to(x.dtype),
    "clone": lambda x: x.clone(),
    "fill_": lambda x: x.clone().fill_(7),
    "zero_": lambda x: x.clone().zero_(),
    "where": lambda x: torch.where(torch.tensor(MASK, device=x.device), x, x * 2),
    "mul": lambda x: x * x,
    "mul scalar": lambda x: x * 3,
    "eq": lambda x: x == x.roll(1),
    "ne scalar": lambda x: x != 2,
    "bitwise_and": lambda x: x & 6,
    "bitwise_or": lambda x: x | x.roll(1),
    "bitwise_xor": lambda x: x ^ x.roll(2),
    "sum": lambda x: x.sum(),
    "sum dim": lambda x: x.view(2, 3).sum(1),
    "prod": lambda x: x.view(2, 3).prod(0),
    "cumsum": lambda x: x.cumsum(0),
    "sort": lambda x: x.sort(descending=True)[0],
    "argsort": lambda x: x.argsort(stable=True),
    "cat": lambda x: torch.cat([x, x[:2]]),
    "index": lambda x: x[torch.tensor([4, 0, 2], device=x.device)],
    "roll": lambda x: x.roll(2),
    "all": lambda x: x.all(),
    "any": lambda x: x.view(2, 3).any(1),
}


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@pytest.mark.parametrize("name", OPS)
def test_unsigned_op_runs_on_the_device_with_cpus_values(name, dtype):
    # Values past int16/int32 where the type holds them (CPU's unsigned values wrap the same way on both).
    high = {torch.uint16: 60000, torch.uint32: 4_000_000_000, torch.uint64: 2**63 + 5}[dtype]
    cpu = torch.tensor([3, 0, high, 1, 2, 5], dtype=dtype)
    expected = OPS[name](cpu)
    with torch.rbln.explain() as ex:
        got = OPS[name](cpu.to("rbln"))
    assert got.device.type == "rbln"
    assert ex.fallback_ops == {}, ex.fallback_ops
    assert got.dtype == expected.dtype
    assert torch.equal(got.cpu(), expected)


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
def test_what_cpu_lacks_for_unsigned_raises_cpus_error(dtype):
    x = torch.tensor([1, 2], dtype=dtype)
    for op in (lambda t: t + t, lambda t: t < t, lambda t: -t, lambda t: t.index_select(0, t.new_zeros(1).long()),
               lambda t: t.masked_fill(torch.ones(2, dtype=torch.bool, device=t.device), 1)):
        with pytest.raises(RuntimeError) as cpu_error:
            op(x)
        with pytest.raises(RuntimeError, match=re.escape(str(cpu_error.value).split("\n")[0])):
            op(x.to("rbln")).cpu()
