"""Every c10d collective on rbln (or cpu) tensors against the answer computed on CPU from
every rank's inputs. Run under torchrun: collectives.py DEVICE [BACKEND]; with no BACKEND,
init_process_group() picks one. Prints one JSON line per rank; exits 1 on any mismatch."""
import datetime
import os
import sys

import torch
import torch.distributed as dist
from report import report

device_type = sys.argv[1]
backend = sys.argv[2] if len(sys.argv) > 2 else None
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", rank)) % max(1, torch.rbln.device_count())
if device_type == "rbln":
    torch.rbln.set_device(local)
device = torch.device(device_type, local) if device_type == "rbln" else torch.device("cpu")
failures, checked = [], 0
R = dist.ReduceOp

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)
DTYPES = FLOATS + INTS + (torch.bool,)


def value(r, shape, dtype, salt=0):
    """Rank r's input: small integers, exact in every dtype and in their sums and products."""
    g = torch.Generator().manual_seed(1000 * r + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    return torch.randint(1, 4, shape, generator=g).to(dtype)


def on(t):
    return t.to(device, copy=True)  # a collective may write it: never the CPU input itself


def check(name, got, expected):
    global checked
    checked += 1
    if isinstance(got, torch.Tensor):
        if got.device != device:
            failures.append(f"{name}: result on {got.device}, not {device}")
            return
        got = got.cpu()
    try:
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    except AssertionError as e:
        failures.append(f"{name}: {str(e).splitlines()[0]}")


def reduce_all(tensors, op, dtype):
    stack = torch.stack([t.to(torch.float64) if dtype != torch.bool else t for t in tensors])
    if dtype == torch.bool:
        stack = stack.to(torch.int64)
    result = {R.SUM: lambda s: s.sum(0), R.PRODUCT: lambda s: s.prod(0), R.MIN: lambda s: s.min(0).values,
              R.MAX: lambda s: s.max(0).values, R.AVG: lambda s: s.sum(0) / world}.get(op)
    if result is not None:
        out = result(stack)
        if op == R.AVG and not dtype.is_floating_point:
            out = torch.div(stack.sum(0), world, rounding_mode="trunc")
        return out.to(dtype) if dtype != torch.bool else out.bool()
    fold = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}[op]
    out = tensors[0].clone()
    for t in tensors[1:]:
        out = fold(out, t)
    return out


def ops_for(dtype):
    if dtype == torch.bool:
        return [R.SUM, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG]
    return ops + ([R.BAND, R.BOR, R.BXOR] if dtype in INTS else [])


shape = (3, 5)
for dtype in DTYPES:
    d = str(dtype).split(".")[1]
    mine = value(rank, shape, dtype)
    everyone = [value(r, shape, dtype) for r in range(world)]

    t = on(mine)
    dist.broadcast(t, src=world - 1)
    check(f"broadcast {d}", t, everyone[-1])

    for op in ops_for(dtype):
        t = on(mine)
        dist.all_reduce(t, op=op)
        check(f"all_reduce {op} {d}", t, reduce_all(everyone, op, dtype))
    if dtype.is_floating_point:
        t = on(mine)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        check(f"all_reduce PREMUL_SUM {d}", t, reduce_all([e * 0.5 for e in everyone], R.SUM, dtype))

    t = on(mine)
    dist.reduce(t, dst=0, op=R.MAX)
    if rank == 0 or device_type == "rbln":  # Gloo leaves other ranks' CPU tensors undefined; rbln-ccl keeps them, as NCCL
        check(f"reduce {d}", t, reduce_all(everyone, R.MAX, dtype) if rank == 0 else mine)

    outs = [on(torch.zeros(shape, dtype=dtype)) for _ in range(world)]
    dist.all_gather(outs, on(mine))
    for r in range(world):
        check(f"all_gather {d} [{r}]", outs[r], everyone[r])

    out = on(torch.zeros((world * 3, 5), dtype=dtype))
    dist.all_gather_into_tensor(out, on(mine))
    check(f"all_gather_into_tensor {d}", out, torch.cat(everyone))

    gathered = [on(torch.zeros(shape, dtype=dtype)) for _ in range(world)] if rank == 0 else None
    dist.gather(on(mine), gathered, dst=0)
    if rank == 0:
        for r in range(world):
            check(f"gather {d} [{r}]", gathered[r], everyone[r])

    pieces = [value(0, shape, dtype, salt=10 + r) for r in range(world)]
    t = on(torch.zeros(shape, dtype=dtype))
    dist.scatter(t, [on(p) for p in pieces] if rank == 0 else None, src=0)
    check(f"scatter {d}", t, pieces[rank])

    if dtype != torch.bool:
        chunks = [value(rank, (2, 5), dtype, salt=20 + r) for r in range(world)]
        mine_for = lambda r_to: [value(r, (2, 5), dtype, salt=20 + r_to) for r in range(world)]  # noqa: E731
        t = on(torch.zeros((2, 5), dtype=dtype))
        dist.reduce_scatter(t, [on(c) for c in chunks], op=R.SUM)
        check(f"reduce_scatter {d}", t, reduce_all(mine_for(rank), R.SUM, dtype))

        t = on(torch.zeros((2, 5), dtype=dtype))
        dist.reduce_scatter_tensor(t, on(torch.cat(chunks)), op=R.SUM)
        check(f"reduce_scatter_tensor {d}", t, reduce_all(mine_for(rank), R.SUM, dtype))
        if dtype.is_floating_point:
            t = on(torch.zeros((2, 5), dtype=dtype))
            dist.reduce_scatter_tensor(t, on(torch.cat(chunks)), op=dist._make_nccl_premul_sum(0.5))
            check(f"reduce_scatter_tensor PREMUL_SUM {d}", t,
                  reduce_all([c * 0.5 for c in mine_for(rank)], R.SUM, dtype))
            t = on(torch.zeros((2, 5), dtype=dtype))
            dist.reduce_scatter_tensor(t, on(torch.cat(chunks)), op=R.AVG)
            check(f"reduce_scatter_tensor AVG {d}", t, reduce_all(mine_for(rank), R.AVG, dtype))

    sends = [value(rank, (r + 1, 5), dtype, salt=30) for r in range(world)]  # rank r gets r+1 rows
    outs = [on(torch.zeros((rank + 1, 5), dtype=dtype)) for _ in range(world)]
    dist.all_to_all(outs, [on(s) for s in sends])
    for r in range(world):
        check(f"all_to_all {d} [{r}]", outs[r], value(r, (rank + 1, 5), dtype, salt=30))

    # Uneven splits: rank r sends (j + 1) rows to rank j.
    send_rows = [j + 1 for j in range(world)]
    recv_rows = [rank + 1] * world
    src = value(rank, (sum(send_rows), 5), dtype, salt=40)
    out = on(torch.zeros((sum(recv_rows), 5), dtype=dtype))
    dist.all_to_all_single(out, on(src), output_split_sizes=recv_rows, input_split_sizes=send_rows)
    start = sum(send_rows[:rank])
    expected = torch.cat([value(r, (sum(send_rows), 5), dtype, salt=40)[start:start + rank + 1] for r in range(world)])
    check(f"all_to_all_single uneven {d}", out, expected)

    peer = (rank + 1) % world
    prev = (rank - 1) % world
    t = on(torch.zeros(shape, dtype=dtype))
    if rank % 2 == 0:
        dist.send(on(mine), dst=peer)
        dist.recv(t, src=prev)
    else:
        dist.recv(t, src=prev)
        dist.send(on(mine), dst=peer)
    check(f"send/recv {d}", t, everyone[prev])

    t = on(torch.zeros(shape, dtype=dtype))
    works = [dist.isend(on(mine), dst=peer), dist.irecv(t, src=prev)]
    for w in works:
        w.wait()
    check(f"isend/irecv {d}", t, everyone[prev])

    t = on(torch.zeros(shape, dtype=dtype))
    ops = [dist.P2POp(dist.isend, on(mine), peer), dist.P2POp(dist.irecv, t, prev)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(f"batch_isend_irecv {d}", t, everyone[prev])

# Coalesced forms.
a, b = [value(rank, (4,), torch.float32, salt=s) for s in (50, 51)]
ta, tb = on(a), on(b)
dist.all_reduce_coalesced([ta, tb])
check("all_reduce_coalesced [0]", ta, sum(value(r, (4,), torch.float32, salt=50) for r in range(world)))
check("all_reduce_coalesced [1]", tb, sum(value(r, (4,), torch.float32, salt=51) for r in range(world)))
outs = [on(torch.zeros(world * 4)), on(torch.zeros(world * 4))]
with dist._coalescing_manager(device=device):
    dist.all_gather_into_tensor(outs[0], on(a))
    dist.all_gather_into_tensor(outs[1], on(b))
check("all_gather_into_tensor coalesced [0]", outs[0], torch.cat([value(r, (4,), torch.float32, salt=50) for r in range(world)]))
check("all_gather_into_tensor coalesced [1]", outs[1], torch.cat([value(r, (4,), torch.float32, salt=51) for r in range(world)]))
big = [value(rank, (world * 2,), torch.float32, salt=s) for s in (52, 53)]
outs = [on(torch.zeros(2)), on(torch.zeros(2))]
with dist._coalescing_manager(device=device):
    dist.reduce_scatter_tensor(outs[0], on(big[0]))
    dist.reduce_scatter_tensor(outs[1], on(big[1]))
for i, s in enumerate((52, 53)):
    total = sum(value(r, (world * 2,), torch.float32, salt=s) for r in range(world))
    check(f"reduce_scatter_tensor coalesced [{i}]", outs[i], total[rank * 2:rank * 2 + 2])
gathered = [[on(torch.zeros(4)) for _ in range(world)], [on(torch.zeros(4)) for _ in range(world)]]
dist.all_gather_coalesced(gathered, [on(a), on(b)])
for r in range(world):  # output_tensor_lists[r] holds rank r's inputs
    check(f"all_gather_coalesced [{r}][0]", gathered[r][0], value(r, (4,), torch.float32, salt=50))
    check(f"all_gather_coalesced [{r}][1]", gathered[r][1], value(r, (4,), torch.float32, salt=51))

# Asynchronous all_reduce: the work, its future and a chained callback.
x = on(torch.full((1 << 16,), float(rank + 1)))
work = dist.all_reduce(x, async_op=True)
doubled = work.get_future().then(lambda fut: fut.value()[0] * 2)
work.wait()
y = x + 1  # queued behind the collective on the caller's stream
total = float(sum(range(1, world + 1)))
check("async all_reduce", y, torch.full((1 << 16,), total + 1))
check("async all_reduce future", doubled.wait(), torch.full((1 << 16,), 2 * total))
if device_type == "rbln":
    torch.rbln.synchronize()
if not work.is_completed():
    failures.append("async all_reduce: not completed after synchronize")

# A large all_reduce (float32 9 MiB, bfloat16 4.5 MiB, int64 18 MiB), PREMUL_SUM and integer AVG
# made around Gloo's SUM, and the future holding the whole tensor.
large = (3, (3 << 20) // 4 + 5)
for dtype, op, name in ((torch.float32, R.SUM, "SUM"), (torch.bfloat16, dist._make_nccl_premul_sum(0.5), "PREMUL_SUM"),
                        (torch.int64, R.AVG, "AVG")):
    everyone = [value(r, large, dtype, salt=60) for r in range(world)]
    t = on(everyone[rank])
    work = dist.all_reduce(t, op=op, async_op=True)
    (result,) = work.get_future().wait()
    expected = (reduce_all([e * 0.5 for e in everyone], R.SUM, dtype) if name == "PREMUL_SUM"
                else reduce_all(everyone, op, dtype))
    check(f"large all_reduce {name} {dtype}", t, expected)
    if result.data_ptr() != t.data_ptr() or result.shape != t.shape:
        failures.append(f"large all_reduce {name}: the future holds {tuple(result.shape)}, not the tensor")

# Gloo works on contiguous device tensors in place (no staging copies on the device) and on
# staging copies of the rest: a reduce_scatter's PREMUL_SUM must not scale the caller's input.
if device_type == "rbln":
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    def staging_copies(prof):
        return sum(e.name in ("Memcpy DtoH", "Memcpy HtoD") and e.device_type == DeviceType.PrivateUse1
                   for e in prof.events())

    everyone = [value(r, (1 << 18,), torch.float32, salt=70) for r in range(world)]
    t = on(everyone[rank])
    torch.rbln.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dist.all_reduce(t)
        torch.rbln.synchronize()
    check("all_reduce in place", t, reduce_all(everyone, R.SUM, torch.float32))
    if staging_copies(prof):
        failures.append(f"all_reduce in place: {staging_copies(prof)} staging copies")

    everyone = [value(r, (world * 4,), torch.float32, salt=71) for r in range(world)]
    source, out = on(everyone[rank]), on(torch.zeros(4))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dist.reduce_scatter_tensor(out, source, op=dist._make_nccl_premul_sum(0.5))
        torch.rbln.synchronize()
    check("reduce_scatter_tensor PREMUL_SUM staged", out,
          reduce_all([e * 0.5 for e in everyone], R.SUM, torch.float32)[rank * 4:rank * 4 + 4])
    check("reduce_scatter_tensor PREMUL_SUM input untouched", source, everyone[rank])
    if staging_copies(prof) < 2:
        failures.append("reduce_scatter_tensor PREMUL_SUM: not staged")

# Inference tensors, made and reduced in inference mode (vLLM's tensor parallelism): the collectives that write
# them from the host backend's threads (AVG's division, all_gather's copies) run with the caller's mode.
with torch.inference_mode():
    mine = value(rank, (4,), torch.float32, salt=80)
    averaged = on(mine)
    dist.all_reduce(averaged, op=R.AVG)
    check("inference mode all_reduce AVG", averaged,
          reduce_all([value(r, (4,), torch.float32, salt=80) for r in range(world)], R.AVG, torch.float32))
    gathered = on(torch.zeros(world * 4))
    dist.all_gather_into_tensor(gathered, on(mine))
    check("inference mode all_gather_into_tensor", gathered,
          torch.cat([value(r, (4,), torch.float32, salt=80) for r in range(world)]))
    pieces = [on(torch.zeros(4)) for _ in range(world)]
    dist.all_gather(pieces, on(mine))
    check("inference mode all_gather", torch.cat(pieces),
          torch.cat([value(r, (4,), torch.float32, salt=80) for r in range(world)]))

dist.barrier()
if backend is not None:  # a group with a CPU backend, as for CUDA; dist.monitored_barrier() itself
    # refuses every backend but "gloo" by name (docs/distributed.md)
    dist.group.WORLD.monitored_barrier(datetime.timedelta(seconds=30), wait_all_ranks=True)

pg_backend = dist.group.WORLD._get_backend(device)
report(**{"rank": rank, "checked": checked, "failures": failures, "backend": pg_backend.name(),
                  "get_backend": str(dist.get_backend())})
dist.destroy_process_group()
sys.exit(1 if failures else 0)
