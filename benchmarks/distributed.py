"""`make bench`'s distributed rows, run by benchmarks/run.py under torchrun with 2 ranks: all_reduce
bus bandwidth on rbln tensors (rbln-ccl) against CPU tensors (Gloo), and a DDP training step on rbln
against the same on CPU, in one process group ("cpu:gloo,rbln:rbln-ccl"), interleaved. Rank 0
prints the rows as one JSON line."""
import argparse
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import run  # benchmarks/run.py: the same interleaved comparison and row format

parser = argparse.ArgumentParser()
parser.add_argument("--repeats", type=int, default=10)
args = parser.parse_args()
dist.init_process_group("cpu:gloo,rbln:rbln-ccl", timeout=datetime.timedelta(seconds=120))
rank, world = dist.get_rank(), dist.get_world_size()
if rank:
    sys.stdout = open(os.devnull, "w")  # rank 0 reports; run.py prints its rows
torch.rbln.set_device(int(os.environ["LOCAL_RANK"]) % torch.rbln.device_count())
rows = []

for size, label in ((1 << 10, "1 KiB"), (1 << 16, "64 KiB"), (1 << 20, "1 MiB"), (1 << 24, "16 MiB"),
                    (1 << 26, "64 MiB")):
    def all_reduce(device, numel=size // 4):
        x = torch.ones(numel, device=device)
        calls = max(1, (1 << 22) // size)  # about 4 MiB per measurement for the small sizes

        def step():
            for _ in range(calls):
                dist.all_reduce(x)
        return step
    # Same bytes both ways, so the time ratio CPU / rbln is the bus bandwidth ratio rbln / CPU.
    rows.append(run.compare(f"all_reduce {label}, 2 ranks, bus bandwidth rbln-ccl / Gloo", "distributed",
                            all_reduce, args.repeats, 0.8, higher_is_better=True, reference="Gloo on CPU tensors"))


def ddp_step(device):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = DDP(nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(512, 512), nn.ReLU())]).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 512, device=device), torch.randn(64, 512, device=device)

    def step():
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return step


rows.append(run.compare("DDP step, 4x Linear(512), batch 64, 2 ranks", "distributed", ddp_step, args.repeats, 1.2,
                        reference="DDP on CPU with Gloo"))
if rank == 0:
    os.write(1, ("ROWS " + json.dumps(rows) + "\n").encode())
dist.destroy_process_group()
