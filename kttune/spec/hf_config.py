"""Read a HuggingFace config.json into a `ModelSpec`.

Key spellings per family follow docs/model-configs.md (the lookup order and its traps); what a
family does differently is its record in `kttune.spec.families` (DeepSeek-V3/R1/V3.1 and Kimi-K2
(MLA), GLM-4.x (`glm4_moe`), Qwen3-MoE, Qwen3-Next (hybrid linear attention), MiniMax-M2
(`minimax_m2`), gpt-oss (`gpt_oss`), Mixtral, ...). Unknown families are read with the generic rules
and a note. The quantization_config dialects (HF-FP8, compressed-tensors, mxfp4,
gptq) map to a checkpoint format and the KT method that serves it natively (docs/weight-formats.md).
Pure Python: no torch, no files.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from typing import Any

from kttune.bounds import CONFIG_COUNT, CONFIG_SIZE, Bound
from kttune.errors import UserError
from kttune.spec.families import (
    EXPERT_COUNT_KEYS,
    LAYER_COUNT_KEYS,
    ROUTER_SCORINGS,
    SHARED_EXPERT_WIDTH_KEYS,
    TOP_K_KEYS,
    FamilyRules,
    family_rules,
)
from kttune.spec import compressed_attention as compressed
from kttune.spec.methods import FORMATS, NATIVE_METHOD_FOR_FORMAT, get_method
from kttune.spec.model_spec import LinearAttentionSpec, ModelSpec, RouterSpec, SparseAttentionSpec

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


def _first(cfg: dict, *keys: str) -> Any:
    """The first key of `keys` present in `cfg` with a non-null value (robust lookup order)."""
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            return v
    return None


# More decoder layers than any checkpoint has by two orders of magnitude (the deepest MoE models
# have under 100): a larger count is a broken config.json, refused before per-layer tables are built.
MAX_LAYERS = 1 << 12


FIX_CONFIG = "fix or re-download config.json"


def _larger_than_real(name: str, key: str, v: int) -> UserError:
    return UserError(f"config.json of {name}: {key} = {v} is larger than any real model's", FIX_CONFIG)


def _key_of(cfg: dict, keys: tuple[str, ...]) -> str:
    return next((k for k in keys if cfg.get(k) is not None), keys[0])


def _int(cfg: dict, name: str, *keys: str, default: int | None = None, rule: Bound = CONFIG_SIZE) -> int:
    """The first of `keys` present, a whole number under `rule` (kttune.bounds: JSON true, 128.7 or
    "64" are refused, never truncated); `default` when none is present, else a UserError."""
    v = _first(cfg, *keys)
    if v is None:
        if default is not None:
            return default
        raise UserError(
            f"config.json of {name} has no {' / '.join(keys)}",
            "point {model} at a HuggingFace causal-LM checkpoint directory (its config.json names the architecture)",
            params=("model",),
        )
    return rule.check(v, _key_of(cfg, keys), where=f"config.json of {name}", fix=FIX_CONFIG)


def _count(cfg: dict, name: str, key: str, default: int = 0) -> int:
    """An optional count or size that may be 0 (`n_shared_experts`, `q_lora_rank`): absent or null
    reads as `default`; present, it is a whole number >= 0."""
    return _int(cfg, name, key, default=default, rule=CONFIG_COUNT)


def _layer_list(cfg: dict, name: str, key: str, num_layers: int) -> list:
    """A per-layer list (`layer_types`, `attn_type_list`): one entry per decoder layer at least."""
    v = cfg[key]
    if not isinstance(v, list) or len(v) < num_layers:
        n = f"{len(v)} entries" if isinstance(v, list) else f"a {type(v).__name__}"
        raise UserError(
            f"config.json of {name}: {key} holds {n} for {num_layers} layers",
            f"give {key} one entry per layer, or {FIX_CONFIG}",
        )
    return v[:num_layers]


def language_config(config: dict) -> dict:
    """The language model's config: multimodal successors (Kimi-K2.5 `kimi_k25`) nest it under
    `text_config`; keys only the outer level holds (quantization_config, dtype) are carried over."""
    inner = config.get("text_config")
    if not isinstance(inner, dict):
        return config
    merged = dict(inner)
    for k in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"):
        if merged.get(k) is None and config.get(k) is not None:
            merged[k] = config[k]
    return merged


# ---- quantization_config -> checkpoint format and KT method ------------------------------------------


def _unsupported_quant(name: str, what: str) -> UserError:
    return UserError(
        f"{name}: unsupported quantization_config ({what})",
        "pass {method} (e.g. {method} AMXINT4 with CPU weights converted by "
        "kt-kernel/scripts/convert_cpu_weights.py) to say how KTransformers serves its experts",
        params=("method",),
    )


def _compressed_tensors_format(qc: dict, name: str) -> str:
    groups = qc.get("config_groups") or {}
    weights = None
    for g in groups.values() if isinstance(groups, dict) else ():
        if isinstance(g, dict) and isinstance(g.get("weights"), dict):
            weights = g["weights"]
            break
    if weights is None:
        raise _unsupported_quant(name, "quant_method 'compressed-tensors' without config_groups weights")
    bits = weights.get("num_bits")
    wtype = str(weights.get("type", "int")).lower()
    strategy = str(weights.get("strategy", "")).lower()
    group = weights.get("group_size")
    fmt_str = str(qc.get("format", "")).lower()
    if wtype == "float" and bits == 8:
        if strategy == "channel":
            return "fp8_channel"
        if strategy == "block":
            return "fp8_block"
    if wtype == "float" and bits == 4 and (group == 16 or "nvfp4" in fmt_str):
        return "nvfp4"
    if wtype == "int" and bits == 4 and strategy == "group" and group == 32:
        return "int4_g32"
    raise _unsupported_quant(
        name,
        f"quant_method 'compressed-tensors', {wtype} {bits}-bit strategy {strategy or '?'}"
        + (f" group_size {group}" if group else ""),
    )


def checkpoint_format_from_quant(config: dict, name: str = "model") -> str:
    """The native expert format (`kttune.spec.methods.FORMATS`) of a checkpoint, from its
    quantization_config. Raises `UserError` for dialects kttune does not model."""
    if str(config.get("expert_dtype", "")).lower() in ("fp4", "mxfp4"):
        return "mxfp4"  # DeepSeek-V4: experts in MXFP4 beside an fp8 quantization_config for the rest
    qc = config.get("quantization_config")
    if not qc:
        return "bf16"
    if not isinstance(qc, dict):
        raise _unsupported_quant(name, f"quantization_config is a {type(qc).__name__}, not an object")
    qm = str(qc.get("quant_method", "")).lower().replace("_", "-")
    if qm == "fp8":
        block = qc.get("weight_block_size")
        if block:
            if list(block) == [1, 32] and str(qc.get("scale_fmt", "ue8m0")).lower() == "ue8m0":
                return "mxfp8"  # e4m3 + ue8m0 per 32 (MiniMax-M3 style)
            return "fp8_block"
        return "fp8_channel"
    if qm == "compressed-tensors":
        return _compressed_tensors_format(qc, name)
    if qm == "mxfp4":
        return "mxfp4"
    if qm == "mxfp8":
        return "mxfp8"
    if qm == "nvfp4" or qm == "modelopt-fp4":
        return "nvfp4"
    if qm == "gptq":
        bits = qc.get("bits", 4)
        if bits != 4:
            raise _unsupported_quant(name, f"quant_method 'gptq' with {bits} bits")
        return "gptq_int4"
    raise _unsupported_quant(name, f"quant_method {qc.get('quant_method')!r}")


# Bytes per weight of a non-expert Linear stored in a quantized format (weight + scale share).
def linear_bytes_per_param(fmt: str, hidden: int) -> float:
    return {
        "fp8_block": 1 + 4 / (128 * 128),
        "fp8_channel": 1 + 4 / max(hidden, 1),
        "int4_g32": 0.5 + 2 / 32,
        "mxfp4": 0.5 + 1 / 32,
        "mxfp8": 1 + 1 / 32,
        "nvfp4": 0.5 + 1 / 16,
        "gptq_int4": 0.5 + 2 / 128,
    }.get(fmt, 2.0)


def _ignore_list(qc: dict) -> list[str] | None:
    """Modules a quantization_config leaves unquantized, or None when the list is absent/unreadable."""
    v = qc.get("modules_to_not_convert")
    if v is None:
        v = qc.get("ignore")
    if v is None:
        v = qc.get("ignored_layers")
    if isinstance(v, list):
        return [str(x) for x in v]
    return None


def _ignored(module: str, patterns: list[str]) -> bool:
    for p in patterns:
        if p.startswith("re:"):
            if re.match(p[3:], module):
                return True
        elif "*" in p:
            if fnmatch.fnmatch(module, p) or fnmatch.fnmatch(module, p + ".*"):
                return True
        elif p in module:  # HF modules_to_not_convert is a substring match
            return True
    return False


# ---- layers ------------------------------------------------------------------------------------------


def _moe_layer_ids(cfg: dict, name: str, num_layers: int) -> tuple[int, ...]:
    freq_list = cfg.get("moe_layer_freq")
    if isinstance(freq_list, list):
        # a flag per decoder layer, 1 where the layer is MoE (MiMo-V2, MiniMax-M3): it says which layers
        # are MoE outright, so first_k_dense_replace, where given too, only has to agree with it
        if len(freq_list) != num_layers or any(f not in (0, 1) for f in freq_list):
            raise UserError(
                f"config.json of {name}: moe_layer_freq is a list of {len(freq_list)} entries, not one 0 or 1 per "
                f"decoder layer ({num_layers})",
                f"give one flag per layer (1 = MoE), or a number, or {FIX_CONFIG}",
            )
        return tuple(i for i, f in enumerate(freq_list) if f == 1)
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:
        # DeepSeek/Kimi/GLM: layer i is MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0
        k = _count(cfg, name, "first_k_dense_replace")
        freq = _int(cfg, name, "moe_layer_freq", default=1)
        return tuple(i for i in range(num_layers) if i >= k and i % freq == 0)
    if "mlp_only_layers" in cfg or "decoder_sparse_step" in cfg:
        # Qwen MoE: MoE iff not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0
        listed = cfg.get("mlp_only_layers") or []
        if not isinstance(listed, list):
            raise UserError(
                f"config.json of {name}: mlp_only_layers = {listed!r} is not a list of layer indices",
                f"list the dense layers, e.g. [0, 1], or {FIX_CONFIG}",
            )
        layer = Bound(0, num_layers - 1, why=f"the model has {num_layers} layers")
        dense = {
            layer.check(i, "mlp_only_layers entry", where=f"config.json of {name}", fix=FIX_CONFIG) for i in listed
        }
        step = _int(cfg, name, "decoder_sparse_step", default=1)
        return tuple(i for i in range(num_layers) if i not in dense and (i + 1) % step == 0)
    return tuple(range(num_layers))  # MiniMax, gpt-oss, Mixtral: every layer is MoE


@dataclass(frozen=True)
class _AttentionLayers:
    full: tuple[int, ...]
    sliding: tuple[int, ...]
    linear: tuple[int, ...]
    sliding_window: int


def _attention_layers(cfg: dict, name: str, rules: FamilyRules, num_layers: int, notes: list[str]) -> _AttentionLayers:
    layers = range(num_layers)
    window = _count(cfg, name, "sliding_window")
    if cfg.get("layer_types") is not None:
        kinds = [str(t) for t in _layer_list(cfg, name, "layer_types", num_layers)]
    elif rules.full_attention_interval or "full_attention_interval" in cfg:
        n = _int(cfg, name, "full_attention_interval", default=rules.full_attention_interval or 4)
        kinds = ["full_attention" if (i + 1) % n == 0 else "linear_attention" for i in layers]
    elif cfg.get("attn_type_list") is not None:
        # MiniMax: 1 = softmax (full) attention, 0 = lightning (linear) attention
        kind = Bound(0, 1)
        kinds = [
            "full_attention"
            if kind.check(t, "attn_type_list entry", where=f"config.json of {name}", fix=FIX_CONFIG) == 1
            else "linear_attention"
            for t in _layer_list(cfg, name, "attn_type_list", num_layers)
        ]
    elif cfg.get("use_sliding_window") and window:
        # Qwen2/3: layers from max_window_layers on use the sliding window
        start = _count(cfg, name, "max_window_layers")
        kinds = ["sliding_attention" if i >= start else "full_attention" for i in layers]
    else:
        if window and rules.sliding_window_ignored:
            notes.append(f"sliding_window {window} ignored: SGLang runs Mixtral with full attention")
        kinds = ["full_attention"] * num_layers
    full = tuple(i for i, t in enumerate(kinds) if t == "full_attention")
    sliding = tuple(i for i, t in enumerate(kinds) if t in ("sliding_attention", "sliding"))
    linear = tuple(i for i, t in enumerate(kinds) if t in ("linear_attention", "linear"))
    other = set(kinds) - {"full_attention", "sliding_attention", "sliding", "linear_attention", "linear"}
    if other:
        raise UserError(
            f"unknown layer_types {sorted(other)} in config.json",
            "kttune knows full_attention, sliding_attention and linear_attention layers; report the model",
        )
    return _AttentionLayers(full, sliding, linear, window if sliding else 0)


# ---- parameter counts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NonExpertParams:
    """Parameters outside the routed experts, by part (estimate from the architecture)."""

    embedding: int
    lm_head: int
    attention_linear: int  # q/k/v/o (MLA: q_a/q_b, kv_a, kv_b, o; Gated DeltaNet projections)
    dense_mlp: int
    shared_experts: int
    routers: int
    other: int  # norms, biases, convs, sinks

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.lm_head
            + self.attention_linear
            + self.dense_mlp
            + self.shared_experts
            + self.routers
            + self.other
        )


def _mla_attention_params(cfg: dict, name: str, h: int, heads: int) -> tuple[int, int]:
    q_lora = _count(cfg, name, "q_lora_rank")
    kv_lora = _int(cfg, name, "kv_lora_rank")
    rope = _count(cfg, name, "qk_rope_head_dim")
    nope = _count(cfg, name, "qk_nope_head_dim")
    v = _int(cfg, name, "v_head_dim", default=nope or 0, rule=CONFIG_COUNT)
    qk = nope + rope
    linear = (h * q_lora + q_lora * heads * qk) if q_lora else h * heads * qk
    linear += h * (kv_lora + rope)  # kv_a_proj_with_mqa
    linear += kv_lora * heads * (nope + v)  # kv_b_proj
    linear += heads * v * h  # o_proj
    norms = q_lora + kv_lora  # q_a_layernorm, kv_a_layernorm
    return linear, norms


def _indexer_params(dsa: SparseAttentionSpec, h: int, q_lora: int) -> tuple[int, int]:
    """One DeepSeek Sparse Attention indexer's parameters, (Linears: wq_b, wk, weights_proj; norms:
    k_norm, a LayerNorm)."""
    return sum(dsa.projection_params(h, q_lora)), 2 * dsa.index_head_dim


def _sparse_attention(cfg: dict, name: str) -> SparseAttentionSpec | None:
    """DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5): SGLang runs a model whose config sets
    `index_topk` with it; None without (docs/cost-model.md#sparse-attention)."""
    if cfg.get("index_topk") is None:
        return None
    return SparseAttentionSpec(
        index_head_dim=_int(cfg, name, "index_head_dim", default=128),
        index_heads=_int(cfg, name, "index_n_heads", default=64),
        index_topk=_int(cfg, name, "index_topk"),
        shared_layer_ids=_index_shared_layers(cfg, name, _int(cfg, name, *LAYER_COUNT_KEYS)),
    )


def _index_shared_layers(cfg: dict, name: str, num_layers: int) -> tuple[int, ...]:
    """The layers with no indexer of their own under IndexShare (GLM-5.2), by the rule SGLang's
    DeepSeek-V2 decoder layer applies (`skip_topk`, docs/cost-model.md#sparse-attention): an
    `index_topk_pattern` string marks each layer F (full) or S (shared); else with
    `index_skip_topk_offset` o layer i shares where max(i - o + 1, 0) is not a multiple of
    `index_topk_freq` f, and without it where max(i - 1, 0) is not. f = 1 (the default): none."""
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) < num_layers or set(pattern) - {"F", "S"}:
            raise UserError(
                f"config.json of {name}: index_topk_pattern must be a string of F and S, one a layer "
                f"({num_layers} layers)",
                "fix index_topk_pattern in config.json, or remove it",
            )
        return tuple(i for i in range(num_layers) if pattern[i] == "S")
    freq = _int(cfg, name, "index_topk_freq", default=1)
    offset = cfg.get("index_skip_topk_offset")
    if offset is None:
        return tuple(i for i in range(num_layers) if max(i - 1, 0) % freq)
    offset = _int(cfg, name, "index_skip_topk_offset")
    return tuple(i for i in range(num_layers) if max(i - offset + 1, 0) % freq)


def _compressed_attention(cfg: dict, name: str, num_layers: int) -> compressed.CompressedAttentionSpec:
    """DeepSeek-V4's attention (kttune.spec.compressed_attention): `compress_ratios` gives each
    decoder layer 0 (the window alone), 4 (c4: compressed entries chosen by an indexer) or 128 (c4's
    coarser kind, every entry), and one more entry for the MTP layer."""
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < num_layers or any(r not in (0, 4, 128) for r in ratios):
        raise UserError(
            f"config.json of {name}: compress_ratios must list 0, 4 or 128 for each of the {num_layers} "
            "decoder layers (and the MTP layer's slot)",
            FIX_CONFIG,
        )
    head_dim = _int(cfg, name, "head_dim")
    rope = _int(cfg, name, "qk_rope_head_dim")
    heads = _int(cfg, name, "num_attention_heads")
    if rope >= head_dim or heads % _int(cfg, name, "o_groups"):
        raise UserError(
            f"config.json of {name}: qk_rope_head_dim {rope} must be below head_dim {head_dim} and o_groups "
            f"divide the {heads} heads",
            FIX_CONFIG,
        )
    return compressed.CompressedAttentionSpec(
        window=_int(cfg, name, "sliding_window"),
        c4_layer_ids=tuple(i for i in range(num_layers) if ratios[i] == 4),
        c128_layer_ids=tuple(i for i in range(num_layers) if ratios[i] == 128),
        ratio_slots=len(ratios),
        head_dim=head_dim,
        rope_dim=rope,
        index_heads=_int(cfg, name, "index_n_heads"),
        index_head_dim=_int(cfg, name, "index_head_dim"),
        index_topk=_int(cfg, name, "index_topk"),
        o_lora_rank=_int(cfg, name, "o_lora_rank"),
        o_groups=_int(cfg, name, "o_groups"),
        hc_mult=_int(cfg, name, "hc_mult"),
    )


def _compressed_attention_params(
    cfg: dict, name: str, ca: compressed.CompressedAttentionSpec, h: int, heads: int, num_layers: int
) -> tuple[int, int]:
    """DeepSeek-V4's attention parameters over all its layers (Linears; norms, sinks, position
    biases and the hyper-connections), by layer kind (`compressed_attention.attention_params`)."""
    parts = compressed.attention_params(h, heads, _count(cfg, name, "q_lora_rank"), ca)
    n4, n128 = len(ca.c4_layer_ids), len(ca.c128_layer_ids)
    hc_layer, hc_head = compressed.hyper_connection_params(h, ca)
    linear = (parts["fp8"] + parts["bf16"]) * num_layers + (parts["c4_fp8"] + parts["c4_bf16"]) * n4
    linear += parts["c128_bf16"] * n128
    other = parts["small"] * num_layers + parts["c4_small"] * n4 + parts["c128_small"] * n128
    return linear, other + hc_layer * num_layers + hc_head


def _compressed_non_expert_bytes(
    cfg: dict,
    name: str,
    p: "NonExpertParams",
    ca: compressed.CompressedAttentionSpec,
    h: int,
    heads: int,
    num_layers: int,
    experts: int,
    top_k: int,
    dtype_bytes: int,
) -> int:
    """DeepSeek-V4's non-expert weights as SGLang holds them on the GPU (docs/deepseek-v4.md#weights):
    the fp8 Linears (wq_a, wq_b, wkv, wo_b, the indexer's wq_b, the shared experts) with a ue8m0 scale
    per 128 x 128 block; wo_a in bf16 (SGLang dequantizes the checkpoint's fp8); the compressors,
    the indexer's weights_proj, the embedding, the head and the routers in bf16; the hyper-connections,
    the position biases and the correction biases in fp32; the hash layers' token-to-expert tables
    (`num_hash_layers` x vocab x top-k) in int32; norms in the 16-bit dtype."""
    parts = compressed.attention_params(h, heads, _count(cfg, name, "q_lora_rank"), ca)
    n, n4, n128 = num_layers, len(ca.c4_layer_ids), len(ca.c128_layer_ids)
    fp8 = parts["fp8"] * n + parts["c4_fp8"] * n4 + p.shared_experts
    bf16 = parts["bf16"] * n + parts["c4_bf16"] * n4 + parts["c128_bf16"] * n128
    bf16 += p.embedding + p.lm_head + h * experts * n
    hc_layer, hc_head = compressed.hyper_connection_params(h, ca)
    fp32 = hc_layer * n + hc_head + experts * n + parts["c4_small"] * n4 + parts["c128_small"] * n128
    norms = (parts["small"] + 2 * h) * n + h
    hash_tables = _count(cfg, name, "num_hash_layers") * _int(cfg, name, "vocab_size") * top_k * 4
    total = fp8 * linear_bytes_per_param("fp8_block", h) + 2 * bf16 + 4 * fp32 + dtype_bytes * norms + hash_tables
    return int(math.ceil(total))


def _gqa_attention_params(
    cfg: dict, rules: FamilyRules, qk_norm: str, h: int, heads: int, kv: int, hd: int
) -> tuple[int, int]:
    q_out = heads * hd
    # Qwen3-Next's gated attention projects q and an output gate of the same size in q_proj.
    q_mult = 2 if _output_gate(cfg, rules) else 1
    linear = h * q_out * q_mult + 2 * h * kv * hd + q_out * h
    other = 0
    if cfg.get("attention_bias"):
        other += q_out * q_mult + 2 * kv * hd
        if rules.attention_sinks:
            other += h + heads  # o_proj bias and attention sinks
    if qk_norm == "per_layer":  # MiniMax: one norm over all heads
        other += q_out + kv * hd
    elif qk_norm == "per_head":
        other += 2 * hd
    return linear, other


def _output_gate(cfg: dict, rules: FamilyRules) -> bool:
    """Whether q_proj also projects an output gate (`attn_output_gate`, the family's default)."""
    return bool(cfg.get("attn_output_gate", rules.attention_output_gate))


def _qk_norm(cfg: dict, rules: FamilyRules) -> str:
    """Which RMSNorm q and k get (kttune.spec.families.QK_NORMS): the family's, or `use_qk_norm`
    with `qk_norm_type` ("per_layer": over all heads at once, else per head)."""
    if not (rules.qk_norm or cfg.get("use_qk_norm")):
        return ""
    return "per_layer" if str(cfg.get("qk_norm_type", "")).lower() == "per_layer" else "per_head"


def _router(cfg: dict, name: str, rules: FamilyRules, num_experts: int, notes: list[str]) -> RouterSpec:
    """The router from `scoring_func`, `n_group`, `topk_group`, `norm_topk_prob`,
    `routed_scaling_factor`, `topk_method` / `use_routing_bias` (a correction bias), with the
    family's defaults where the config is silent."""
    # a routing bias comes with sigmoid scores (MiniMax-M2's `use_routing_bias`, as DeepSeek-V3's)
    default = "sigmoid" if cfg.get("use_routing_bias") else rules.router_scoring
    scoring = str(cfg.get("scoring_func") or default).lower()
    if scoring not in ROUTER_SCORINGS:
        notes.append(f"router scoring_func {scoring!r} not modelled: the path runner routes with sigmoid scores")
        scoring = "sigmoid"
    n_group = _int(cfg, name, "n_group", default=1)
    topk_group = _int(cfg, name, "topk_group", default=1)
    if num_experts % n_group or topk_group > n_group:
        raise UserError(
            f"config.json of {name}: {num_experts} experts in n_group {n_group} groups, topk_group {topk_group}",
            f"n_group must divide the expert count and topk_group be at most n_group; {FIX_CONFIG}",
        )
    scaling = cfg.get("routed_scaling_factor")
    if scaling is not None and (
        isinstance(scaling, bool) or not isinstance(scaling, (int, float)) or not math.isfinite(scaling) or scaling <= 0
    ):
        raise UserError(
            f"config.json of {name}: routed_scaling_factor = {scaling!r} is not a positive number", FIX_CONFIG
        )
    return RouterSpec(
        scoring=scoring,
        n_group=n_group,
        topk_group=topk_group,
        bias=rules.router_correction_bias or bool(cfg.get("use_routing_bias")) or cfg.get("topk_method") == "noaux_tc",
        renormalize=bool(cfg.get("norm_topk_prob", True)),
        scaling=float(scaling or 1.0),
        gate_bias=rules.router_gate_bias,
    )


# `mamba_ssm_dtype` -> bytes of the recurrent state (SGLang `mamba2_state_dtype`: float32 unless set)
_SSM_STATE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _linear_attention(cfg: dict, name: str, notes: list[str]) -> LinearAttentionSpec:
    """A Gated DeltaNet layer's shape (transformers `Qwen3NextGatedDeltaNet`; SGLang's defaults where
    the config is silent)."""
    ssm = str(cfg.get("mamba_ssm_dtype") or "float32")
    if ssm not in _SSM_STATE_BYTES:
        notes.append(f"mamba_ssm_dtype {ssm!r} is not one SGLang takes; it keeps the state in float32")
        ssm = "float32"
    return LinearAttentionSpec(
        num_key_heads=_int(cfg, name, "linear_num_key_heads", default=16),
        num_value_heads=_int(cfg, name, "linear_num_value_heads", default=32),
        key_head_dim=_int(cfg, name, "linear_key_head_dim", default=128),
        value_head_dim=_int(cfg, name, "linear_value_head_dim", default=128),
        conv_kernel=_int(cfg, name, "linear_conv_kernel_dim", default=4),
        ssm_state_bytes=_SSM_STATE_BYTES[ssm],
    )


def _linear_attention_params(lin: LinearAttentionSpec, h: int) -> tuple[int, int]:
    """Parameters of one Gated DeltaNet layer: in_proj_qkvz, in_proj_ba and out_proj; conv1d, A_log +
    dt_bias and the gated norm."""
    key_dim, value_dim, nv = lin.key_dim, lin.value_dim, lin.num_value_heads
    linear = h * (2 * key_dim + 2 * value_dim) + h * 2 * nv + value_dim * h
    other = (2 * key_dim + value_dim) * lin.conv_kernel + 2 * nv + lin.value_head_dim
    return linear, other


# ---- the reader -------------------------------------------------------------------------------------


def spec_from_config(config: dict, name: str, source: str, method: str | None = None) -> ModelSpec:
    """Build a `ModelSpec` from a raw HF config.json dict (`_`-prefixed provenance keys are ignored).

    `method` (a `--kt-method` value) replaces the detected default method; the checkpoint format stays
    the checkpoint's. Raises `UserError` for dense models, missing keys and unknown quantization.
    """
    return _read(config, name, source, method)[0]


def _read(
    config: dict, name: str, source: str, method: str | None, strict_quant: bool = True
) -> tuple[ModelSpec, NonExpertParams]:
    """`_parse` with every value it cannot use turned into one `UserError` naming the file."""
    try:
        spec, params = _parse(config, name, source, method, strict_quant)
    except UserError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError, OverflowError, IndexError) as e:
        raise UserError(
            f"config.json of {name} holds a value kttune cannot read ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:160]})",
            "fix or re-download config.json",
        ) from None
    _check_sizes(spec, name)
    return spec, params


def _check_sizes(spec: ModelSpec, name: str) -> None:
    """Architecture sizes that no real checkpoint has: zero, negative, or contradicting each other."""
    for field_name, key in (
        ("hidden_size", "hidden_size"),
        ("num_layers", "num_hidden_layers"),
        ("top_k", "num_experts_per_tok"),
        ("moe_intermediate_size", "moe_intermediate_size"),
        ("vocab_size", "vocab_size"),
        ("num_attention_heads", "num_attention_heads"),
        ("num_kv_heads", "num_key_value_heads"),
        ("head_dim", "head_dim"),
    ):
        v = getattr(spec, field_name)
        if v < 1:
            raise UserError(f"config.json of {name}: {key} = {v} must be at least 1", "fix or re-download config.json")
        if v > 1 << 24:
            raise _larger_than_real(name, key, v)
    if spec.top_k > spec.num_experts:
        raise UserError(
            f"config.json of {name}: {spec.top_k} experts per token but only {spec.num_experts} experts",
            "fix num_experts_per_tok or the expert count in config.json",
        )
    if spec.num_kv_heads > spec.num_attention_heads and spec.attention != "mla":
        raise UserError(
            f"config.json of {name}: {spec.num_kv_heads} KV heads exceed {spec.num_attention_heads} attention heads",
            "fix num_key_value_heads in config.json",
        )
    if spec.max_position_embeddings < 0 or spec.num_experts > 1 << 16:
        raise UserError(
            f"config.json of {name}: max_position_embeddings / expert count out of range",
            "fix or re-download config.json",
        )


# Config keys of architectures whose layers kttune's memory and cost models would misread, with what
# they mean: such a config is refused rather than read by the generic rules (docs/model-configs.md).
UNMODELLED_KEYS = {
    "compress_ratios": "compressed sparse attention",  # DeepSeek-V4: KV compressed 4x / 128x per layer
    "hc_mult": "hyper-connections",  # DeepSeek-V4: several residual streams per layer
    "sparse_attention_config": "its own sparse attention",  # MiniMax-M3: sparse attention on most layers
    "hybrid_layer_pattern": "sliding-window layers with their own heads",  # MiMo-V2: swa_num_key_value_heads
    "routed_expert_hidden_size": "experts in a smaller hidden size (latent MoE)",  # Kimi-K3: 3584 of 7168
    "linear_attn_config": "Kimi Delta Attention",  # Kimi Linear / Kimi-K3: linear layers with their own state
    "hybrid_override_pattern": "Mamba-2 layers",  # Nemotron-H: a per-layer pattern of Mamba, attention and MoE
    "interleave_moe_layer_step": "dense and MoE layers interleaved, with a shared expert",  # Llama 4
    "global_head_dim": "full-attention layers with their own head size and KV heads",  # Gemma 4
}


# The keys a family's own record models (kttune.spec.families).
MODELLED_BY_COMPRESSED_ATTENTION = frozenset({"compress_ratios", "hc_mult"})


def _refuse_unmodelled(cfg: dict, name: str, family: str, rules: FamilyRules) -> None:
    modelled = MODELLED_BY_COMPRESSED_ATTENTION if rules.compressed_attention else frozenset()
    found = [f"{why} ({k})" for k, why in UNMODELLED_KEYS.items() if cfg.get(k) is not None and k not in modelled]
    if found:
        raise UserError(
            f"{name} ({family}) uses {' and '.join(found)}, which kttune does not model: its KV pool, "
            "attention and weights would be misread",
            "kttune cannot advise on this architecture yet (docs/model-configs.md#architectures-kttune-refuses); "
            "pick a supported model (run `kttune models`)",
        )


def _moe_keys_elsewhere(cfg: dict, prefix: str = "") -> list[str]:
    """Keys naming an expert count > 1 in places kttune does not read (e.g. DBRX's
    ffn_config.moe_num_experts): the config is MoE, not dense."""
    found = []
    for k, v in cfg.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            found += _moe_keys_elsewhere(v, path + ".")
        elif (
            "expert" in str(k).lower()
            and "per_tok" not in str(k).lower()
            and "top" not in str(k).lower()
            and isinstance(v, int)
            and not isinstance(v, bool)
            and v > 1
        ):
            found.append(path)
    return found


def _parse(
    config: dict, name: str, source: str, method: str | None, strict_quant: bool = True
) -> tuple[ModelSpec, NonExpertParams]:  # noqa: C901
    if not isinstance(config, dict):
        raise UserError(f"config.json of {name} is not a JSON object", "fix or re-download config.json")
    cfg = language_config(config)
    notes: list[str] = []
    family = str(cfg.get("model_type") or config.get("model_type") or "unknown")
    rules = family_rules(family)
    _refuse_unmodelled(cfg, name, family, rules)
    if cfg is not config:
        notes.append(f"language model read from text_config ({config.get('model_type')} -> {family})")
    if not rules.tested:
        notes.append(f"model_type {family!r} is not one kttune was tested on; keys read by the generic rules")

    # Expert count: never num_experts_per_tok (that is top-k; kt's tuna_engine reads it as E).
    num_experts = _first(cfg, *EXPERT_COUNT_KEYS)
    if num_experts is None and _moe_keys_elsewhere(cfg):
        keys = ", ".join(_moe_keys_elsewhere(cfg)[:3])
        raise UserError(
            f"{name} is a mixture-of-experts config ({family}) whose expert count sits in {keys}, "
            "a layout kttune does not read",
            f"kttune reads {' / '.join(EXPERT_COUNT_KEYS)}; pick a supported family (run `kttune models`)",
        )
    if num_experts is not None:
        num_experts = _int(cfg, name, *EXPERT_COUNT_KEYS, rule=CONFIG_COUNT)
    if num_experts is None or num_experts <= 1:
        raise UserError(
            f"{name} is a dense model (no routed experts); kttune tunes MoE models served with KTransformers",
            "pick an MoE model (run `kttune models` for the catalog) or a checkpoint whose config.json has "
            + " / ".join(EXPERT_COUNT_KEYS),
        )
    h = _int(cfg, name, "hidden_size")
    num_layers = _int(cfg, name, *LAYER_COUNT_KEYS)
    if num_layers > MAX_LAYERS:  # checked before the per-layer tables below are built
        raise _larger_than_real(name, "num_hidden_layers", num_layers)
    top_k = _int(cfg, name, *TOP_K_KEYS)
    expert_width = _int(cfg, name, *rules.expert_width_keys)
    dense_width = _count(cfg, name, rules.dense_width_key) if rules.dense_width_key else 0
    count_key = rules.shared_expert_count_key
    if count_key and count_key in cfg:
        shared_width = _count(cfg, name, count_key) * expert_width  # a count of expert-wide MLPs
    else:
        shared_width = _int(cfg, name, *SHARED_EXPERT_WIDTH_KEYS, default=0, rule=CONFIG_COUNT)

    moe_ids = _moe_layer_ids(cfg, name, num_layers)
    if not moe_ids:
        raise UserError(
            f"{name} is a dense model (no routed experts); kttune tunes MoE models served with KTransformers",
            "check first_k_dense_replace / mlp_only_layers / decoder_sparse_step in config.json",
        )
    moe_set = set(moe_ids)
    dense_ids = [i for i in range(num_layers) if i not in moe_set]
    if dense_ids and dense_width == 0:
        raise UserError(f"config.json of {name} has dense layers but no intermediate_size", "fix config.json")

    heads = _int(cfg, name, "num_attention_heads", "n_heads")
    kv_heads = _int(cfg, name, "num_key_value_heads", "num_attention_heads", "n_heads")
    vocab = _int(cfg, name, "vocab_size")
    max_pos = _int(cfg, name, "max_position_embeddings", "seq_length", default=0, rule=CONFIG_COUNT)
    tie = bool(cfg.get("tie_word_embeddings", False))
    mla = rules.mla or _count(cfg, name, "kv_lora_rank") > 0
    qk_norm = "" if mla else _qk_norm(cfg, rules)

    layers = _attention_layers(cfg, name, rules, num_layers, notes)
    ca = _compressed_attention(cfg, name, num_layers) if rules.compressed_attention else None
    if ca is not None:  # DeepSeek-V4: every layer attends through the compressed form
        head_dim = v_head_dim = ca.head_dim
        attn_linear, attn_other = 0, 0  # counted per layer kind below
    elif mla:
        rope = _count(cfg, name, "qk_rope_head_dim")
        nope = _count(cfg, name, "qk_nope_head_dim")
        head_dim = _int(cfg, name, "head_dim", default=0) if not (nope or rope) else nope + rope
        v_head_dim = _int(cfg, name, "v_head_dim", default=nope, rule=CONFIG_COUNT)
        attn_linear, attn_other = _mla_attention_params(cfg, name, h, heads)
    else:
        if heads % kv_heads:
            raise UserError(
                f"config.json of {name}: {heads} attention heads do not split over {kv_heads} KV heads "
                "(grouped-query attention shares each KV head by a whole number of heads)",
                "fix num_attention_heads / num_key_value_heads in config.json",
            )
        head_dim = _int(cfg, name, "head_dim", default=h // heads)  # absent: hidden / heads; present: at least 1
        v_head_dim = head_dim
        attn_linear, attn_other = _gqa_attention_params(cfg, rules, qk_norm, h, heads, kv_heads, head_dim)
    lin_linear, lin_other = (0, 0)
    linear_attention = _linear_attention(cfg, name, notes) if layers.linear else None
    if linear_attention is not None:
        lin_linear, lin_other = _linear_attention_params(linear_attention, h)
    n_softmax = len(layers.full) + len(layers.sliding)
    n_linear = len(layers.linear)
    dsa = _sparse_attention(cfg, name) if mla else None
    idx_linear = idx_other = 0  # an indexer in every attention layer but IndexShare's shared ones
    if dsa is not None:
        indexers = n_softmax - len(dsa.shared_layer_ids)
        idx_linear, idx_other = (n * indexers for n in _indexer_params(dsa, h, _count(cfg, name, "q_lora_rank")))

    n_moe = len(moe_ids)
    router = _router(cfg, name, rules, num_experts, notes)
    # DeepSeek noaux_tc / MiniMax use_routing_bias / gpt-oss gate bias: one bias per expert.
    router_bias = router.bias or router.gate_bias
    shared_gate = h if rules.shared_expert_gate and shared_width else 0
    if ca is not None:  # DeepSeek-V4's layers differ by kind: their sums, in the indexer's slots
        idx_linear, idx_other = _compressed_attention_params(cfg, name, ca, h, heads, num_layers)
    params = NonExpertParams(
        embedding=vocab * h,
        lm_head=0 if tie else vocab * h,
        attention_linear=attn_linear * n_softmax + lin_linear * n_linear + idx_linear,
        dense_mlp=3 * h * dense_width * len(dense_ids),
        shared_experts=(3 * h * shared_width + shared_gate) * n_moe,
        routers=(h * num_experts + (num_experts if router_bias else 0)) * n_moe,
        other=attn_other * n_softmax + lin_other * n_linear + 2 * h * num_layers + h + idx_other,
    )

    if method is None and not strict_quant:
        method = "BF16"  # parameter counts only: any quantization will do
    ckpt_format = checkpoint_format_from_quant(cfg, name) if method is None else None
    default_method = NATIVE_METHOD_FOR_FORMAT.get(ckpt_format) if ckpt_format else None
    if method is not None:
        m = get_method(method)
        try:
            ckpt_format = checkpoint_format_from_quant(cfg, name)
        except UserError:
            ckpt_format = m.cpu_format if m.native else "bf16"
            notes.append(
                f"checkpoint quantization not modelled; GPU-side experts assumed {ckpt_format} for --kt-method {m.name}"
            )
        if m.native and m.cpu_format != ckpt_format:
            notes.append(
                f"--kt-method {m.name} reads {m.cpu_format} experts from --kt-weight-path; "
                f"this checkpoint holds {ckpt_format}"
            )
        default_method = m.name
    assert ckpt_format in FORMATS and default_method

    dtype_bytes = _DTYPE_BYTES.get(str(_first(cfg, "torch_dtype", "dtype") or "bfloat16").lower(), 2)
    if ca is not None:
        est_bytes = _compressed_non_expert_bytes(
            cfg, name, params, ca, h, heads, num_layers, num_experts, top_k, dtype_bytes
        )
    else:
        est_bytes = _non_expert_bytes_estimate(cfg, params, ckpt_format, dtype_bytes, h)

    spec = ModelSpec(
        name=name,
        family=family,
        hidden_size=h,
        num_layers=num_layers,
        moe_layer_ids=moe_ids,
        num_experts=num_experts,
        top_k=top_k,
        moe_intermediate_size=expert_width,
        shared_expert_intermediate_size=shared_width,
        dense_intermediate_size=dense_width,
        vocab_size=vocab,
        max_position_embeddings=max_pos,
        tie_word_embeddings=tie,
        attention="csa" if ca is not None else ("mla" if mla else "gqa"),
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        kv_lora_rank=_count(cfg, name, "kv_lora_rank") if mla else 0,
        q_lora_rank=_count(cfg, name, "q_lora_rank") if (mla or ca) else 0,
        qk_rope_head_dim=_count(cfg, name, "qk_rope_head_dim") if (mla or ca) else 0,
        sparse_attention=dsa,
        compressed_attention=ca,
        qk_norm=qk_norm,
        attention_output_gate=not (mla or ca) and _output_gate(cfg, rules),
        full_attention_layer_ids=layers.full,
        sliding_window=layers.sliding_window,
        sliding_layer_ids=layers.sliding,
        linear_attention_layer_ids=layers.linear,
        linear_attention=linear_attention,
        router=router,
        checkpoint_format=ckpt_format,
        default_method=default_method,
        non_expert_dtype_bytes=dtype_bytes,
        non_expert_params_estimate=params.total,
        non_expert_bytes_estimate=est_bytes,
        source=source,
        notes=tuple(notes),
    )
    return spec, params


def non_expert_params(config: dict, name: str = "model") -> NonExpertParams:
    """The per-part non-expert parameter estimate of a raw config (for reports and tests)."""
    return _read(config, name, "", method=None, strict_quant=False)[1]


def _non_expert_bytes_estimate(cfg: dict, p: NonExpertParams, fmt: str, dtype_bytes: int, h: int) -> int:
    """Bytes of the non-expert weights as stored: in a quantized checkpoint the attention, dense-MLP and
    shared-expert Linears are quantized too unless the quantization_config's ignore list names them
    (DeepSeek/Qwen3/MiniMax FP8 quantize attention; Kimi-K2-Thinking INT4 and gpt-oss MXFP4 do not).
    Embeddings, lm_head, routers and norms stay in the 16-bit dtype."""
    qc = cfg.get("quantization_config")
    if not isinstance(qc, dict) or fmt == "bf16":
        return p.total * dtype_bytes
    ignore = _ignore_list(qc) or []
    q_bytes = linear_bytes_per_param(fmt, h)
    parts = (
        (p.attention_linear, "model.layers.0.self_attn.o_proj"),
        (p.dense_mlp, "model.layers.0.mlp.down_proj"),
        (p.shared_experts, "model.layers.9.mlp.shared_experts.down_proj"),
    )
    total = float(p.embedding + p.lm_head + p.routers + p.other) * dtype_bytes
    for n, module in parts:
        if family_module_ignored(module, ignore):
            total += n * dtype_bytes
        else:
            total += n * q_bytes
    return int(math.ceil(total))


def family_module_ignored(module: str, ignore: list[str]) -> bool:
    """Whether a representative module name is left unquantized (also tries the shared_expert and
    Gated-DeltaNet spellings)."""
    alts = [module]
    if "shared_experts" in module:
        alts.append(module.replace("shared_experts", "shared_expert"))
    if "self_attn" in module:
        alts.append(module.replace("self_attn", "linear_attn"))
    return any(_ignored(m, ignore) for m in alts)
