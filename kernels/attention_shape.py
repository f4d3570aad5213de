"""One layer's attention dimensions: the one definition the decoder layers of the path runner
(`kttune.kernels.decoder.Attention`) build from and the attention probe (`probes/gpu_attention.py`)
measures and names its profile curves by. Pure Python (no torch), so the probes that only describe
shapes stay importable without it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kttune.spec.model_spec import ModelSpec


@dataclass(frozen=True)
class AttentionShape:
    """kind: gqa | mla; head_dim: the q/k head dim (MLA: qk_nope + qk_rope); rope_dim: MLA's
    qk_rope_head_dim; layer_kind: full | sliding | linear, with `window` tokens for sliding layers.
    `name` labels a probe's curve (the model it was taken from)."""

    kind: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    v_head_dim: int
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    rope_dim: int = 0
    qk_norm: str = ""  # RMSNorm of q and k: "per_head" (Qwen3, GLM-4.5), "per_layer" (MiniMax-M2), "" none
    output_gate: bool = False  # q_proj also projects a sigmoid gate on the attention output (Qwen3-Next)
    layer_kind: str = "full"
    window: int = 0
    name: str = ""

    @property
    def attention(self) -> str:
        """The kind under the name the profile's `attention` curves use."""
        return self.kind

    @property
    def qk_rope_head_dim(self) -> int:
        return self.rope_dim

    def params(self) -> dict:
        """The `attention` curve's params (kttune/hw/profile.py): keys unchanged since the first
        shipped profiles, so their curves still match."""
        return {
            "attention": self.kind,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "v_head_dim": self.v_head_dim,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.rope_dim,
        }


def attention_shape(spec: "ModelSpec", layer_id: int) -> AttentionShape:
    """The attention of decoder layer `layer_id` of `spec`, as the path runner builds it."""
    kind = (
        "sliding"
        if layer_id in spec.sliding_layer_ids
        else ("linear" if layer_id in spec.linear_attention_layer_ids else "full")
    )
    return AttentionShape(
        kind=spec.attention,
        hidden=spec.hidden_size,
        heads=spec.num_attention_heads,
        kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        v_head_dim=spec.v_head_dim,
        kv_lora_rank=spec.kv_lora_rank,
        q_lora_rank=spec.q_lora_rank,
        rope_dim=spec.qk_rope_head_dim,
        qk_norm=spec.qk_norm,
        output_gate=spec.attention_output_gate and kind != "linear",
        layer_kind=kind,
        window=spec.sliding_window,
        name=spec.name,
    )


def block_layer_id(spec: "ModelSpec") -> int:
    """The decoder layer whose attention block the attention-block probe times: the first MoE layer
    with full attention (neither sliding nor linear, as `attention_shape` classifies it), else the
    first MoE layer."""
    other = set(spec.sliding_layer_ids) | set(spec.linear_attention_layer_ids)
    full = [lid for lid in spec.moe_layer_ids if lid not in other]
    return (full or list(spec.moe_layer_ids) or [0])[0]
