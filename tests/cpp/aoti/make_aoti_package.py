"""The Python step of the C++ AOTInductor test (tests/cpp/aoti/test_aoti_package.cpp): packages a small rbln
model with a dynamic batch into <dir>/model.pt2 and saves inputs of two batch sizes with CPU's outputs for
them in <dir>/io.pt (a list [x, expected, x, expected, ...] that torch::pickle_load reads), and in
<dir>/swap.pt other weights for the package with CPU's output for the first x with them."""
import sys
from pathlib import Path

import torch
import torch_rbln  # noqa: F401

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
batch = torch.export.Dim("batch", min=1, max=64)
ep = torch.export.export(model.to("rbln"), (torch.randn(3, 8, device="rbln"),), dynamic_shapes=({0: batch},))
torch._inductor.aoti_compile_and_package(ep, package_path=str(out / "model.pt2"))
model = model.cpu()
io = []
with torch.no_grad():
    for rows in (3, 7):
        x = torch.randn(rows, 8)
        io += [x, model(x)]
    weights = {name: param.mul(2).add(0.5) for name, param in model.named_parameters() if name != "2.bias"}
    for name, value in weights.items():  # 2.bias (4 values) is compiled into a kernel: not a package weight
        model.get_parameter(name).copy_(value)
    swap = {"weights": weights, "expected": model(io[0])}
torch.save(io, out / "io.pt")
torch.save(swap, out / "swap.pt")
