"""One kt-kernel MoE layer built from host expert weights: the `MOEConfig` sglang-kt's wrappers fill
(`NativeMoEWrapper.load_weights`, `AMXMoEWrapper.load_weights_from_tensors`, kt-kernel 0.7.2
`kt_kernel/utils/amx.py`), the class picked from what the loaded extension variant compiled in, and
`load_weights_task`. Shared by the CPU MoE probe (`forward_task`) and the layerwise stage A writer
(`write_weight_scale_to_buffer_task`).
"""

from __future__ import annotations

from typing import Any, Sequence

from kttune.spec.methods import FP8_BLOCK

# kt-kernel MoE classes per method, most preferred first (the order kt-kernel 0.7.2's own
# selection uses: `utils/amx.py` `_select_rawint4_backend`, FP8/BF16 "prefer AMX, fall back to
# AVX2"). A class is used only if the loaded extension variant compiled it in; `needs` names host
# ISA flags a class needs beyond that (kt-kernel checks AVX-VNNI at run time).
KT_CLASS_PREFERENCE: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "AMXINT4": (("AMXInt4_MOE", ()),),
    "AMXINT8": (("AMXInt8_MOE", ()),),
    "BF16": (("AMXBF16_MOE", ()), ("AVX2BF16_MOE", ())),
    "FP8": (("AMXFP8_MOE", ()), ("AVX2FP8_MOE", ())),
    "FP8_PERCHANNEL": (("AMXFP8PerChannel_MOE", ()),),
    "RAWINT4": (
        ("AMXInt4_KGroup_MOE", ()),
        ("AVXVNNI256RawInt4_MOE", ("avx_vnni",)),
        ("AVX2RawInt4_MOE", ()),
    ),
}

# AMXINT4/AMXINT8 are quantized online by kt-kernel from one flat bf16 pointer per matrix; the
# other methods take one pointer per expert.
ONLINE_QUANTIZED = ("AMXINT4", "AMXINT8")


def class_candidates(moe_module: Any, method: str, isa: Sequence[str] | None = None, *, writer: bool = False) -> list[str]:
    """kt-kernel MoE class names for `method`, most preferred first, that the loaded variant
    compiled in (and, with `isa`, whose extra ISA needs the host meets; with `writer`, that have
    `write_weight_scale_to_buffer_task`)."""
    names = set(dir(moe_module))
    out = []
    for name, needs in KT_CLASS_PREFERENCE.get(method.upper(), ()):
        if name not in names or (isa is not None and not all(f in isa for f in needs)):
            continue
        if writer and not hasattr(getattr(moe_module, name), "write_weight_scale_to_buffer_task"):
            continue
        out.append(name)
    return out


def expert_ptrs(t: Any) -> list[int]:
    """One address per expert of an `[E, ...]` tensor."""
    base = t.data_ptr()
    stride = t[0].numel() * t.element_size()
    return [base + e * stride for e in range(t.shape[0])]


class KtMoe:
    """A kt-kernel MoE layer of class `cls_name` over the `[E, ...]` host tensors gate/up/down (and
    scales), on worker pool `cpu` (a CPUInfer), with its weights loaded. Keeps alive every tensor the
    C++ side reads through raw pointers; dropping the object frees the layer."""

    def __init__(self, ext: Any, cpu: Any, cls_name: str, method: str, *, hidden: int, inter: int, top_k: int,
                 max_len: int, gate: Any, up: Any, down: Any, gate_scale: Any = None, up_scale: Any = None,
                 down_scale: Any = None) -> None:
        import torch

        method = method.upper()
        experts = gate.shape[0]
        self.cls_name, self.method = cls_name, method
        self._tensors = (gate, up, down, gate_scale, up_scale, down_scale)
        self._mask = torch.zeros(experts, dtype=torch.bool)
        self._map = torch.arange(experts, dtype=torch.int64)
        cfg = ext.moe.MOEConfig(experts, top_k, hidden, inter, self._mask.data_ptr())
        cfg.layer_idx = 0
        cfg.pool = cpu.backend_
        cfg.max_len = max_len
        if method in ONLINE_QUANTIZED:
            cfg.gate_proj, cfg.up_proj, cfg.down_proj = gate.data_ptr(), up.data_ptr(), down.data_ptr()
            cfg.load = False
            cfg.save = False
        else:
            cfg.gate_projs = [expert_ptrs(gate)]
            cfg.up_projs = [expert_ptrs(up)]
            cfg.down_projs = [expert_ptrs(down)]
            none = [0] * experts
            cfg.gate_scales = [expert_ptrs(gate_scale) if gate_scale is not None else none]
            cfg.up_scales = [expert_ptrs(up_scale) if up_scale is not None else none]
            cfg.down_scales = [expert_ptrs(down_scale) if down_scale is not None else none]
            qc = cfg.quant_config
            if method == "FP8":
                qc.bits, qc.group_size, qc.zero_point = 8, FP8_BLOCK, False
            elif method == "FP8_PERCHANNEL":
                qc.bits, qc.per_channel, qc.zero_point = 8, True, False
            elif method == "RAWINT4":
                qc.bits, qc.group_size, qc.zero_point = 4, hidden // gate_scale.shape[-1], False
        self._cfg = cfg
        self.moe = getattr(ext.moe, cls_name)(cfg)
        cpu.submit(self.moe.load_weights_task(self._map.data_ptr()))
        cpu.sync()
