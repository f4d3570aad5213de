"""The model as kttune sees it: an architecture reduced to what the memory and cost models need.

Built by `kttune.spec.hf_config` from a HuggingFace config.json (or a catalog entry). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kttune.spec.compressed_attention import CompressedAttentionSpec


@dataclass(frozen=True)
class RouterSpec:
    """How a model picks its experts per token (how many: `ModelSpec.top_k`), from the HF config keys
    `scoring_func`, `n_group`, `topk_group`, `norm_topk_prob` and `routed_scaling_factor` and the
    family's defaults (`kttune.spec.families`)."""

    scoring: str = "softmax"  # softmax | sigmoid | sqrtsoftplus (kttune.spec.families.ROUTER_SCORINGS)
    n_group: int = 1  # expert groups; > 1: grouped top-k (groups ranked by their top-2 score sum)
    topk_group: int = 1  # groups a token may route into
    bias: bool = False  # a per-expert score correction added for the choice only (e_score_correction_bias)
    renormalize: bool = True  # the top-k weights are renormalised to sum to 1 (norm_topk_prob)
    scaling: float = 1.0  # routed_scaling_factor applied to the routed output
    gate_bias: bool = False  # the gate Linear has a bias (gpt-oss): E more router parameters


# FLA's tile for the chunked gated delta rule SGLang runs a linear-attention layer's prefill with
# (`chunk_local_cumsum(g, chunk_size=64)` in layers/attention/fla/chunk.py): the cost model's flops
# and the VRAM check's per-tile states (docs/cost-model.md#linear-attention-layers).
GDN_CHUNK = 64


@dataclass(frozen=True)
class LinearAttentionSpec:
    """The shape of a Gated DeltaNet layer (Qwen3-Next, Qwen3.5: transformers `Qwen3NextGatedDeltaNet`):
    its projections' parameters and the recurrent state SGLang keeps per request both come from it
    (docs/memory.md#linear-attention-state)."""

    num_key_heads: int  # linear_num_key_heads
    num_value_heads: int  # linear_num_value_heads
    key_head_dim: int  # linear_key_head_dim
    value_head_dim: int  # linear_value_head_dim
    conv_kernel: int  # linear_conv_kernel_dim
    ssm_state_bytes: int = 4  # `mamba_ssm_dtype` of the config (float32 unless it says)

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim


@dataclass(frozen=True)
class SparseAttentionSpec:
    """DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): a small indexer scores every earlier token with
    `index_heads` fp8 heads of `index_head_dim`, and each query attends to the `index_topk` best in
    MLA's latent form. Its key is cached per token and layer beside the latent
    (docs/memory.md#kv-bytes-per-token-kv_cell_bytes, docs/cost-model.md#sparse-attention)."""

    index_head_dim: int  # index_head_dim
    index_heads: int  # index_n_heads
    index_topk: int  # index_topk: the tokens each query attends to
    # IndexShare (GLM-5.2): layers with no indexer of their own, which reuse the top-k of the layer
    # before (`index_topk_freq`, `index_skip_topk_offset`, `index_topk_pattern`)
    shared_layer_ids: tuple[int, ...] = ()

    def projection_params(self, hidden: int, q_lora_rank: int) -> tuple[int, int]:
        """The indexer's Linear parameters in one layer, (query side, key side): wq_b (from the
        query's LoRA latent, or the hidden state without one) and weights_proj (a gate per head) make
        the query side, wk the key. SGLang's nsa backend runs the key side alone where a forward's
        sequence holds no more than the top-k tokens, and no other backend runs either
        (docs/cost-model.md#sparse-attention)."""
        query = (q_lora_rank or hidden) * self.index_heads * self.index_head_dim + hidden * self.index_heads
        return query, hidden * self.index_head_dim


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # HF model_type of the language model (deepseek_v3, kimi_k2, qwen3_moe, ...)
    hidden_size: int
    num_layers: int  # num_hidden_layers (MTP / next-n layers excluded)
    moe_layer_ids: tuple[int, ...]  # decoder layers whose MLP is routed MoE
    num_experts: int  # routed experts per MoE layer (E)
    top_k: int  # experts per token (k)
    moe_intermediate_size: int  # per-expert FFN width (I)
    shared_expert_intermediate_size: int  # total width of shared expert(s) per MoE layer, 0 if none
    dense_intermediate_size: int  # FFN width of dense (non-MoE) layers
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    # attention
    attention: str  # "mla" | "gqa" | "csa" (DeepSeek-V4's compressed sparse attention)
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int  # q/k head dim (MLA: qk_nope + qk_rope)
    v_head_dim: int
    kv_lora_rank: int = 0  # MLA only
    q_lora_rank: int = 0  # MLA only (0 = no q compression)
    qk_rope_head_dim: int = 0  # MLA only
    sparse_attention: SparseAttentionSpec | None = None  # DeepSeek Sparse Attention's indexer, where the model has one
    # DeepSeek-V4's compressed sparse attention (attention "csa"): window, compressed entries, indexer
    compressed_attention: CompressedAttentionSpec | None = None
    qk_norm: str = ""  # RMSNorm of q and k: "per_head" (Qwen3, GLM-4.5), "per_layer" (MiniMax-M2), "" none
    attention_output_gate: bool = False  # q_proj also projects a sigmoid gate on the attention output (Qwen3-Next)
    full_attention_layer_ids: tuple[int, ...] = ()  # layers that keep a KV cache growing with context
    sliding_window: int = 0  # gpt-oss sliding layers (KV capped at the window)
    sliding_layer_ids: tuple[int, ...] = ()
    linear_attention_layer_ids: tuple[int, ...] = ()  # Qwen3-Next Gated DeltaNet layers (no KV)
    linear_attention: LinearAttentionSpec | None = None  # their shape, where the model has such layers
    router: RouterSpec = field(default_factory=RouterSpec)
    # weights
    checkpoint_format: str = "bf16"  # native expert format (see kttune.spec.methods.FORMATS)
    default_method: str = "BF16"  # KT method detected from quantization_config
    non_expert_dtype_bytes: int = 2
    non_expert_bytes_measured: int | None = None  # exact bytes from safetensors headers, if read
    non_expert_params_estimate: int = 0  # from the architecture, used when headers are absent
    # Bytes of that estimate as stored (quantized checkpoints keep attention/shared Linears in the
    # checkpoint format, embeddings and norms in 16 bit); None = params x non_expert_dtype_bytes.
    non_expert_bytes_estimate: int | None = None
    source: str = ""  # where this spec came from (catalog name, directory, provenance grade)
    notes: tuple[str, ...] = field(default_factory=tuple)

    # ---- derived -----------------------------------------------------------------------------
    @property
    def indexer_layer_ids(self) -> tuple[int, ...]:
        """The layers that run a sparse-attention indexer of their own: every full-attention layer of
        a model with sparse attention but IndexShare's shared ones; () without sparse attention."""
        if self.sparse_attention is None:
            return ()
        shared = set(self.sparse_attention.shared_layer_ids)
        return tuple(i for i in self.full_attention_layer_ids if i not in shared)

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe_layer_ids)

    @property
    def kv_layer_count(self) -> int:
        return len(self.full_attention_layer_ids) + len(self.sliding_layer_ids)

    @property
    def params_per_expert(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def non_expert_bytes(self) -> int:
        """Bytes of everything but the routed experts (attention, dense MLPs, shared experts,
        embeddings, norms, routers): measured from safetensors headers when available."""
        if self.non_expert_bytes_measured is not None:
            return self.non_expert_bytes_measured
        if self.non_expert_bytes_estimate is not None:
            return self.non_expert_bytes_estimate
        return self.non_expert_params_estimate * self.non_expert_dtype_bytes

    def with_overrides(self, **kw) -> "ModelSpec":
        return replace(self, **kw)
