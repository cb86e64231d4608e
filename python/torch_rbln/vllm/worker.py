"""vLLM's worker on rbln: vLLM's GPU worker with the device set up through torch.rbln; the rest of it and vLLM's
V1 model runner go through torch.accelerator, torch.Event and pinned memory, which rbln implements."""
from __future__ import annotations

import gc
from contextlib import AbstractContextManager, nullcontext

import torch
from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.config import CUDAGraphMode
from vllm.distributed.parallel_state import get_pp_group
from vllm.model_executor.model_loader import get_model_loader
from vllm.platforms import current_platform
from vllm.utils.mem_utils import MemorySnapshot
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes
from vllm.v1.worker.utils import request_memory

from .graphs import RBLNGraphWrapper, capture_model
from .runner import RBLNModelRunner


class RBLNWorker(Worker):
    def init_device(self) -> None:
        self.device = torch.device("rbln", self.local_rank)
        current_platform.set_device(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        # The process group first, so that its buffers count as used before the snapshot (as on CUDA).
        init_worker_distributed_environment(
            self.vllm_config, self.rank, self.distributed_init_method, self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        gc.collect()
        torch.accelerator.empty_cache()
        external_weight_memory = get_model_loader(self.load_config).get_external_weight_memory(self.vllm_config)
        self.init_snapshot = MemorySnapshot(device=self.device)
        self.requested_memory = request_memory(self.init_snapshot, self.cache_config, external_weight_memory)
        self._init_workspace_and_model_runner()

    def _make_model_runner(self) -> RBLNModelRunner:
        return RBLNModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag: str) -> AbstractContextManager:
        # No sleep mode (vLLM's CuMem allocator) on rbln: weights, workspace and KV cache use the caching allocator.
        return nullcontext()

    def load_model(self, **kwargs) -> None:
        super().load_model(**kwargs)
        runner = self.model_runner
        if type(runner.model) is CUDAGraphWrapper:  # vLLM's runner wraps the model in CUDA's for FULL graphs
            runner.model = RBLNGraphWrapper(runner.model.unwrap(), self.vllm_config, runner.model.runtime_mode)

    def compile_or_warm_up_model(self) -> CompilationTimes:
        """No compilation and none of vLLM's CUDA kernel warm-ups (whose imports reach for torchvision's compiled
        ops); the decode graphs captured unless eager; the sampler's buffers of the largest batch allocated up
        front, as on CUDA, and the seed reset after profiling."""
        if not self.model_config.enforce_eager:
            capture_model(self.model_runner)
        if get_pp_group().is_last_rank and not self.model_runner.is_pooling_model:
            num_reqs = min(self.scheduler_config.max_num_seqs, self.scheduler_config.max_num_batched_tokens)
            _, last_hidden_states = self.model_runner._dummy_run(
                num_tokens=num_reqs, skip_eplb=True, cudagraph_runtime_mode=CUDAGraphMode.NONE)
            self.model_runner._dummy_sampler_run(hidden_states=last_hidden_states)
        set_random_seed(self.model_config.seed, self.parallel_config.data_parallel_index)
        return CompilationTimes(language_model=0.0, encoder=0.0)
