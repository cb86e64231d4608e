"""What users run on rbln-ccl, 3 SGD steps each against one process training on the whole
batch on CPU: train.py MODES [CHECKPOINT_DIR] [--backend NAME], MODES a comma-separated list of ddp,
ddp_device_ids, ddp_fp16_hook, ddp_bf16_hook, ddp_unused, fsdp2, fsdp2_mixed, hsdp, dtensor, dcp_save, dcp_load
(these two with a checkpoint directory), run one after another in one process group. Run under torchrun
(init_process_group() picks the backend); prints one JSON line per rank with each mode's failures and facts,
exits 1 on a mismatch."""
import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist
from report import report
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("modes")
parser.add_argument("checkpoint", nargs="?")
parser.add_argument("--backend", help="default: none named, init_process_group() picks")
args = parser.parse_args()
dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", rank)) % torch.rbln.device_count()
torch.rbln.set_device(local)
device = torch.device("rbln", local)
STEPS, BATCH = 3, 16  # the same batches whatever the world size (1, 2 or 4 ranks)


class Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.a = nn.Linear(6, 16)
        self.b = nn.Linear(16, 3)
        self.unused = nn.Linear(16, 3) if unused else None

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def data():
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(BATCH, 6, generator=g), torch.randn(BATCH, 3, generator=g)) for _ in range(STEPS)]


def reference(unused=False):
    torch.manual_seed(0)
    model = Net(unused)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data():
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {k: v.detach() for k, v in model.state_dict().items()}


def train(model, shard_of_batch=True):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    per = BATCH // world
    for x, y in data():
        if shard_of_batch:
            x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        opt.zero_grad()
        nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
        opt.step()
    return model


def full_state(model):
    out = {}
    for k, v in model.state_dict().items():
        v = v.full_tensor() if hasattr(v, "full_tensor") else v
        assert v.device.type == "rbln", (k, v.device)
        out[k.removeprefix("module.")] = v.detach().float().cpu()
    return out


def compare(failures, got, expected, tol):
    for k, v in expected.items():
        try:
            torch.testing.assert_close(got[k], v, rtol=tol, atol=tol)
        except AssertionError as e:
            failures.append(f"{k}: {str(e).splitlines()[0]}")


def run(mode, failures):
    """Trains (or checks) one mode, appending mismatches to failures; returns the facts the test checks."""
    torch.manual_seed(0)
    if mode.startswith("ddp"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel as DDP

        unused = mode == "ddp_unused"
        net = Net(unused).to(device)
        kwargs = {"device_ids": [local]} if mode == "ddp_device_ids" else {}
        ddp = DDP(net, find_unused_parameters=unused, **kwargs)
        if mode == "ddp_fp16_hook":
            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        if mode == "ddp_bf16_hook":
            import torch_rbln.distributed

            ddp.register_comm_hook(None, torch_rbln.distributed.bf16_compress_hook)
        train(ddp)
        low_precision = mode in ("ddp_fp16_hook", "ddp_bf16_hook")
        compare(failures, full_state(ddp), reference(unused), 2e-2 if low_precision else 1e-5)
        logged = ddp._get_ddp_logging_data()
        return {"ddp_backend_name": logged.get("backend_name"), "ddp_device": logged.get("device_ids", "")}
    if mode in ("fsdp2", "fsdp2_mixed", "hsdp", "dcp_save", "dcp_load"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh("rbln", (2, world // 2) if mode == "hsdp" else (world,),
                                mesh_dim_names=("replicate", "shard") if mode == "hsdp" else None)
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if mode == "fsdp2_mixed" else MixedPrecisionPolicy()
        net = Net().to(device)
        for layer in (net.a, net.b):
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(net, mesh=mesh, mp_policy=policy)
        import torch.distributed.checkpoint as dcp

        if mode == "dcp_load":  # another world size than the one that saved: resharded on load
            state = {"model": net.state_dict()}
            dcp.load(state, checkpoint_id=args.checkpoint)
            net.load_state_dict(state["model"])
        else:
            train(net)
        compare(failures, full_state(net), reference(), 3e-2 if mode == "fsdp2_mixed" else 1e-5)
        if mode == "dcp_save":
            dcp.save({"model": net.state_dict()}, checkpoint_id=args.checkpoint)
        return {"mesh": list(mesh.shape)}
    if mode == "dtensor":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        mesh = init_device_mesh("rbln", (world,))
        full = torch.arange(4.0 * world * 3).view(4 * world, 3)
        sharded = distribute_tensor(full.to(device), mesh, [Shard(0)])
        local_part = sharded.to_local()
        if local_part.device != device or not torch.equal(local_part.cpu(), full[rank * 4:(rank + 1) * 4]):
            failures.append("wrong local shard")
        total = (sharded * 2).sum()
        if float(total.full_tensor().cpu()) != float((full * 2).sum()):
            failures.append("wrong sum")
        replicated = sharded.redistribute(mesh, [Replicate()]).to_local()
        if not torch.equal(replicated.cpu(), full):
            failures.append("wrong redistribute")
        mm = (sharded @ distribute_tensor(torch.eye(3).to(device), mesh, [Replicate()])).full_tensor()
        if not torch.equal(mm.cpu(), full):
            failures.append("wrong matmul")
        return {}
    raise SystemExit(f"unknown mode {mode}")


modes = {}
for mode in args.modes.split(","):
    failures = []
    modes[mode] = {"failures": failures, **run(mode, failures)}

report(rank=rank, backend=str(dist.get_backend()), modes=modes)
dist.destroy_process_group()
sys.exit(1 if any(m["failures"] for m in modes.values()) else 0)
