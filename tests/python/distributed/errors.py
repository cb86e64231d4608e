"""Bad input and a timed-out collective on rbln-ccl, two ranks under torchrun: each error is
raised where c10d raises it, and the device still computes. Prints one JSON line per rank."""
import datetime
import os

import torch
import torch.distributed as dist
from report import report

dist.init_process_group("rbln-ccl", timeout=datetime.timedelta(seconds=3))
rank = dist.get_rank()
torch.rbln.set_device(int(os.environ["LOCAL_RANK"]) % torch.rbln.device_count())
store = dist.distributed_c10d._get_default_store()
seen = {}


def error_of(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001  (the type is part of what is reported)
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


# One collective with tensors on two devices.
seen["mixed_devices"] = error_of(lambda: dist.all_gather([torch.zeros(2, device="rbln"), torch.zeros(2)],
                                                         torch.ones(2, device="rbln")))
t = torch.full((4,), float(rank + 1), device="rbln")
dist.all_reduce(t)
seen["after_bad_input"] = t.cpu().tolist()

# Rank 1 skips one all_reduce: rank 0's times out. The failure reaches rank 0's stream (the
# next synchronizing call raises it), then every later collective on that group refuses.
if rank == 0:
    x = torch.ones(4, device="rbln")
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    seen["timeout"] = error_of(lambda: x.cpu())
    seen["work_exception"] = work.exception() is not None
    seen["later_collective"] = error_of(lambda: dist.all_reduce(torch.ones(1, device="rbln")))
    seen["device_still_works"] = (torch.arange(4, device="rbln") * 2).cpu().tolist()
    store.set("rank0_done", "1")
else:
    store.wait(["rank0_done"], datetime.timedelta(seconds=60))
report(**{"rank": rank, **seen})
