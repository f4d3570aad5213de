"""One MoE layer's routed experts, the shape every part of kttune that builds, measures, sizes or
fits a MoE layer speaks in: the CPU and GPU probes, the host-RAM probe and the memory model's
kt-kernel scratch formula, and the typed view of a MoE curve's params (kttune.hw.curve_kinds).

The field names are the keys the probes write into a curve's `params` (the profile on disk), so a
curve's params and its shape are the same four numbers. Derived from a `ModelSpec` by `of_model`.
Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kttune.spec.methods import bytes_per_expert, get_method


@dataclass(frozen=True)
class MoeLayerShape:
    """H, I, E and k of one MoE layer (element counts; ModelSpec: hidden_size, moe_intermediate_size,
    num_experts, top_k), the KT method its weights are in where that is fixed (a GPU probe, a curve, a
    host-RAM point; "" where a probe runs several), and whose layer it is (for labels)."""

    hidden: int  # H: hidden size, elements per token
    inter: int  # I: one expert's FFN width, elements
    experts: int  # E: routed experts of the layer (or those a measurement built)
    top_k: int  # k: experts per token
    method: str = ""  # KT method (kttune.spec.methods.METHODS), "" = not fixed
    name: str = ""  # the model (or shape set) it is the layer of

    @classmethod
    def of_model(cls, model: Any, method: str = "", name: str | None = None) -> "MoeLayerShape":
        """The routed-expert shape of a `kttune.spec.model_spec.ModelSpec`."""
        return cls(
            hidden=int(model.hidden_size),
            inter=int(model.moe_intermediate_size),
            experts=int(model.num_experts),
            top_k=int(model.top_k),
            method=method,
            name=model.name if name is None else name,
        )

    @property
    def label(self) -> str:
        return self.name or f"H{self.hidden} I{self.inter} E{self.experts} k{self.top_k}"

    @property
    def params_per_expert(self) -> int:
        """Gate, up and down projections: 3 x H x I."""
        return 3 * self.hidden * self.inter

    @property
    def fmt(self) -> str:
        """The CPU-side weight format of `method` (kttune.spec.methods)."""
        return get_method(self.method).cpu_format

    @property
    def bytes_per_expert(self) -> int:
        return bytes_per_expert(self.fmt, self.hidden, self.inter)

    @property
    def layer_bytes(self) -> int:
        return self.experts * self.bytes_per_expert

    def with_experts(self, experts: int) -> "MoeLayerShape":
        return replace(self, experts=experts)

    def with_method(self, method: str) -> "MoeLayerShape":
        return replace(self, method=method)
