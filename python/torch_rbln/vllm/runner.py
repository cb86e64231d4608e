"""vLLM's V1 GPU model runner on rbln with async scheduling: the next step is scheduled while the device computes
this one, and the sampled tokens come back on a side stream. vLLM creates that stream and its events through
`torch.cuda`; here the runner's functions that do are vLLM's own, with `torch.cuda` meaning torch.rbln's."""
from __future__ import annotations

import inspect

import torch
from vllm.model_executor.warmup.jit_warmup import JitWarmupRegistry
from vllm.v1.worker import gpu_model_runner as vllm_runner

from torch_rbln.rbln.graphs import _on_rbln


class _AsyncOutput(vllm_runner.AsyncGPUModelRunnerOutput):
    __init__ = _on_rbln(vllm_runner.AsyncGPUModelRunnerOutput.__init__)


class RBLNModelRunner(vllm_runner.GPUModelRunner):
    # The functions as vLLM decorates them (inspect.unwrap: their own code is what is rebound).
    __init__ = JitWarmupRegistry.capture(_on_rbln(inspect.unwrap(vllm_runner.GPUModelRunner.__init__)))
    _get_or_create_async_output_copy_stream = _on_rbln(
        vllm_runner.GPUModelRunner._get_or_create_async_output_copy_stream)
    sample_tokens = torch.inference_mode()(
        _on_rbln(inspect.unwrap(vllm_runner.GPUModelRunner.sample_tokens), AsyncGPUModelRunnerOutput=_AsyncOutput))
