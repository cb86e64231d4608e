"""vLLM's Platform for rbln: device, memory, seeds, graphs and distributed backend from torch.rbln."""
from __future__ import annotations

import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum

logger = init_logger(__name__)


class RBLNPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "rbln"
    device_type = "rbln"
    dispatch_key = "PrivateUse1"
    ray_device_key = "rbln"
    dist_backend = "rbln-ccl"
    device_control_env_var = "RBLN_VISIBLE_DEVICES"
    simple_compile_backend = "rbln"
    supported_quantization: list[str] = []

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32, torch.float16, torch.bfloat16]

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"rbln: model dtype {dtype} is not supported (float32, float16, bfloat16 are)")

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.rbln.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.rbln.get_device_properties(device_id).total_memory

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.rbln.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.rbln.manual_seed_all(seed)

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return True

    @classmethod
    def inference_mode(cls):
        return torch.inference_mode(mode=True)

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        torch.rbln.reset_peak_memory_stats(device)
        return torch.rbln.max_memory_allocated(device)

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        return "torch_rbln.vllm.attention.RBLNAttentionBackend"

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        parallel_config = vllm_config.parallel_config
        if parallel_config.worker_cls == "auto":
            parallel_config.worker_cls = "torch_rbln.vllm.worker.RBLNWorker"
        # torch.compile as vLLM's CPU platform runs it: Dynamo traces the model once and Inductor compiles it for
        # rbln (vLLM's piecewise backend and its fusion passes are CUDA's); Triton's combo kernels are off.
        compilation_config = vllm_config.compilation_config
        if compilation_config.mode == CompilationMode.VLLM_COMPILE:
            compilation_config.mode = CompilationMode.DYNAMO_TRACE_ONCE
            compilation_config.backend = "inductor"
            compilation_config.inductor_compile_config.update({"combo_kernels": False, "benchmark_combo_kernel": False})
        # Graph mode replays whole (compiled) decode steps (the paged-attention kernel takes any batch:
        # FULL_DECODE_ONLY); mixed batches run without graphs.
        if compilation_config.cudagraph_mode != CUDAGraphMode.NONE:
            if parallel_config.world_size > 1:  # rbln-ccl's collectives cannot be captured yet
                logger.warning("rbln: graph mode runs one rank only; %d ranks run eagerly", parallel_config.world_size)
                compilation_config.cudagraph_mode = CUDAGraphMode.NONE
            else:
                compilation_config.cudagraph_mode = CUDAGraphMode.FULL_DECODE_ONLY
        cache_config = vllm_config.cache_config
        if cache_config.block_size is None:
            cache_config.block_size = 16

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from vllm.triton_utils.dispatcher import register_kernels

        from .kernels import OVERRIDES

        register_kernels(OVERRIDES)

    @classmethod
    def opaque_attention_op(cls) -> bool:
        # Attention (and its cache writes) is one custom op in the compiled graph, as on CUDA and CPU: traced
        # through, it would bake one step's block tables and slots into the graph.
        return True

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def support_static_graph_mode(cls) -> bool:
        return True

    @classmethod
    def get_static_graph_wrapper_cls(cls) -> str:
        return "torch_rbln.vllm.graphs.RBLNGraphWrapper"
