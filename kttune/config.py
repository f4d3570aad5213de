"""A launch configuration: the flags kttune chooses, with units in the names."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LaunchConfig:
    method: str  # --kt-method
    tp: int  # --tensor-parallel-size
    num_gpu_experts: int  # --kt-num-gpu-experts, per MoE layer
    chunked_prefill_size: int  # --chunked-prefill-size (tokens per prefill forward)
    gpu_prefill_token_threshold: int  # --kt-gpu-prefill-token-threshold, 0 = layerwise off
    max_total_tokens: int  # --max-total-tokens (KV pool size in tokens)
    cpuinfer_threads: int  # --kt-cpuinfer
    threadpool_count: int = 1  # --kt-threadpool-count (one pool per NUMA node)
    numa_nodes: tuple[int, ...] = ()  # --kt-numa-nodes, one id per pool; () = kt-kernel's 0..pools-1
    max_running_requests: int = 32  # --max-running-requests
    cuda_graph_max_bs: int = 32  # --cuda-graph-max-bs
    kv_cache_dtype_bytes: int = 2  # --kv-cache-dtype auto (bf16) = 2
    context_length: int = 0  # --context-length; 0 = model's max_position_embeddings
    page_size: int = 1
    # --max-mamba-cache-size: state slots of linear-attention layers (Qwen3-Next, Qwen3.5); 0 = what
    # kttune launches with, 3 per running request (kttune.memory.vram.linear_state_slots)
    linear_state_slots: int = 0
    # --attention-backend; "" = what kttune launches the model's attention kind with
    # (kttune.memory.vram.LAUNCH_ATTENTION_BACKEND: triton for MLA, flashinfer otherwise); "auto" = a
    # command that leaves it to SGLang (docs/cost-model.md#mla-prefill-forms)
    attention_backend: str = ""

    def __post_init__(self) -> None:
        # from JSON the node ids arrive as a list: keep the config hashable and equal to itself
        object.__setattr__(self, "numa_nodes", tuple(self.numa_nodes))

    def layerwise_can_fire(self, method_supports_layerwise: bool) -> bool:
        """Layerwise fires only for a forward of >= threshold tokens, and a forward never exceeds the
        chunk (docs/sglang-kt.md#the-per-forward-switch), so it can fire only when 0 < threshold <= chunk."""
        t = self.gpu_prefill_token_threshold
        return method_supports_layerwise and 0 < t <= self.chunked_prefill_size

    def to_dict(self) -> dict:
        """JSON-ready: sequences as lists, so a document read back compares equal."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
