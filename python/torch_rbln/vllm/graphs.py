"""vLLM's graph mode on rbln: vLLM's CUDAGraphWrapper with torch.cuda's graph names meaning torch.rbln's, and the
capture of the model runner's decode batch sizes on an rbln side stream (docs/serving.md#graph-mode)."""
from __future__ import annotations

import torch
from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.compilation.monitor import set_cudagraph_capturing_enabled

from torch_rbln.rbln.graphs import _on_rbln


class RBLNGraphWrapper(CUDAGraphWrapper):
    """The platform's static graph wrapper: vLLM's own capture and replay per batch descriptor (its forward
    context says when), recording into torch.rbln graphs from the global graph pool. Two of its helpers differ:
    `current_stream` is the rbln stream current at the call (vLLM's caches the first one it sees, the default
    stream, where a capture cannot run), and a graph's output stays an owning tensor (vLLM's weak references
    are a compiled op of its CUDA build): each captured size keeps its one hidden-state output."""

    __call__ = _on_rbln(CUDAGraphWrapper.__call__, current_stream=torch.rbln.current_stream,
                        weak_ref_tensors=lambda tensors: tensors)


def capture_model(runner) -> None:
    """vLLM's GPUModelRunner.capture_model on rbln: each batch descriptor the dispatcher wants, warmed up and
    captured by `_capture_cudagraphs` on a side stream (vLLM's `graph_capture` context creates a CUDA stream)."""
    set_cudagraph_capturing_enabled(True)
    try:
        with torch.rbln.stream(torch.rbln.Stream(runner.device)):
            for runtime_mode, batch_descriptors in runner.cudagraph_dispatcher.get_capture_descs():
                runner._capture_cudagraphs(batch_descriptors, runtime_mode)
        torch.rbln.synchronize(runner.device)
    finally:
        set_cudagraph_capturing_enabled(False)
