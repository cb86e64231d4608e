"""Max pooling in rbln graphs runs rbln's pooling kernel instead of Inductor's loops.

Inductor lowers max pooling to loops that its C++ code vectorizes across
channels: contiguous in the channels_last layout, a gather per lane in the
contiguous one (ResNet-18's stem pooling at batch 8 took 11.6 ms so, rbln's
vectorized kernel about 5). The rbln backend's post-grad pass (`BackendVersion`,
registered with register_backend_for_device) replaces each 2-d max pooling
whose indices nothing reads with `rbln::max_pool2d`, which Inductor calls as an
extern kernel on the stream, in graphs Inductor keeps contiguous; a graph with
convolutions goes channels_last (upstream_patches.py) and keeps Inductor's loops.
"""
from __future__ import annotations

import operator

import torch
from torch._inductor.graph import GraphLowering
from torch.fx import GraphModule

_DEVICE_TYPE = "rbln"
_library = torch.library.Library("rbln", "DEF")
_library.define("max_pool2d(Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, "
                "bool ceil_mode) -> Tensor")


def _max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode):
    return torch.ops.aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


_library.impl("max_pool2d", _max_pool2d, "PrivateUse1")
_library.impl("max_pool2d", _max_pool2d, "Meta")


def use_rbln_max_pool(gm: GraphModule) -> None:
    """Rewrites Inductor's low-memory max pooling on rbln, where only its values are read."""
    if GraphLowering.decide_layout_opt(gm, is_inference=True):
        return  # the graph goes channels_last, where Inductor's loops vectorize as CPU's
    graph = gm.graph
    for node in graph.find_nodes(op="call_function", target=torch.ops.prims._low_memory_max_pool_with_offsets.default):
        x, kernel_size = node.args[0], node.args[1]
        value = x.meta.get("val")
        if len(kernel_size) != 2 or not isinstance(value, torch.Tensor) or value.device.type != _DEVICE_TYPE:
            continue
        users = list(node.users)
        if not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
            continue  # the offsets make indices for a backward: Inductor's loops produce both
        with graph.inserting_before(node):
            pooled = graph.call_function(torch.ops.rbln.max_pool2d.default, node.args)
        pooled.meta.update(users[0].meta if users else node.meta)
        for user in users:
            user.replace_all_uses_with(pooled)
            graph.erase_node(user)
        graph.erase_node(node)
    gm.recompile()
