"""What one path-runner run records. The JSON form (`to_dict`) is the results-file format other
tools read (reports, memory calibration, validation); its keys are stable:

PathRun.to_dict() = {
  "model", "method", "tp", "layers_run", "model_layers", "model_moe_layers",
  "gpu_experts", "chunk", "threshold", "cpuinfer", "prompt_tokens", "forced_path",
  "forwards": [{"tokens", "prefix", "path", "layer_ms": [..K], "attn_ms": [..K], "moe_ms": [..K],
                "attn_peak_bytes", "moe_peak_bytes"}],   # device peaks by phase (0 off CUDA)
  "measured_ms"            # the K layers, wall clock, CUDA-synchronised, whole prompt
  "extrapolated_ms"        # to the model's full layer count (see `extrapolation`)
  "extrapolation",         # how
  "moe_layer_ms": {"hybrid": mean per MoE layer per forward size, "layerwise": ...} per forward,
  "peak_allocated_bytes", "peak_reserved_bytes", "baseline_allocated_bytes",
  "buffer_tokens"          # rows of the stack's device-side buffers (its largest forward)
  "layer_weight_bytes"     # the K layers' attention, norms, router and shared experts, as held
  "device", "backends": {...}, "notes": [...],
  "timing": {"measured_ms": Estimate, "extrapolated_ms": Estimate}   # repeats (kttune.protocol), or {}
}
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace


@dataclass(frozen=True)
class ForwardRecord:
    """One prefill forward (chunk) through the K layers."""

    tokens: int
    prefix: int
    path: str  # hybrid | layerwise
    layer_ms: tuple[float, ...]  # per layer, attention + router + MoE + shared
    attn_ms: tuple[float, ...]  # per layer: norms, attention, router
    moe_ms: tuple[float, ...]  # per layer: routed experts (both paths' work) + shared experts
    attn_peak_bytes: int = 0  # device peak while the attention block and router ran (max over layers; CUDA)
    moe_peak_bytes: int = 0  # device peak while the MoE block ran (max over layers; CUDA)

    @property
    def total_ms(self) -> float:
        return sum(self.layer_ms)

    @property
    def mean_moe_ms(self) -> float:
        return sum(self.moe_ms) / len(self.moe_ms)

    @property
    def mean_attn_ms(self) -> float:
        return sum(self.attn_ms) / len(self.attn_ms)


@dataclass(frozen=True)
class PathRun:
    model: str
    method: str
    tp: int
    layers_run: int
    model_layers: int
    model_moe_layers: int
    gpu_experts: int
    chunk: int
    threshold: int
    cpuinfer: int
    prompt_tokens: int
    forwards: tuple[ForwardRecord, ...]
    forced_path: str | None = None
    peak_allocated_bytes: int = 0
    peak_reserved_bytes: int = 0
    baseline_allocated_bytes: int = 0
    buffer_tokens: int = 0  # rows the stack's device buffers are sized for (0: not recorded)
    layer_weight_bytes: int = 0  # the K layers' non-expert weights as the runner holds them (0: not recorded)
    device: str = ""
    backends: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # the measurement protocol's record of this run's repeats (kttune.protocol): {"measured_ms":
    # Estimate.to_dict(), "extrapolated_ms": Estimate.to_dict()}; this record's forwards are the
    # sample nearest the median. {} for a single run.
    timing: dict = field(default_factory=dict)

    @property
    def measured_ms(self) -> float:
        return sum(f.total_ms for f in self.forwards)

    @property
    def extrapolated_ms(self) -> float:
        """Each forward: its mean measured MoE-layer time x the model's MoE layers, plus its mean
        attention time x all the model's layers (dense layers' MLPs are not run)."""
        return sum(f.mean_moe_ms * self.model_moe_layers + f.mean_attn_ms * self.model_layers for f in self.forwards)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.forwards)

    @property
    def pipeline_driver(self) -> str | None:
        """The layerwise pipeline this run's session used, from `backends["layerwise_pipeline"]` (a
        `PipelineConfig.label`): "sglang-kt" for sglang-kt 0.7.2's own loop (kttune.cost.components.
        SGLANG_KT_PIPELINE, the runner's default), else its driver ("host" or "stream"); None where it
        is not recorded."""
        from kttune.cost.components import SGLANG_KT_DRIVER, SGLANG_KT_PIPELINE

        label = self.backends.get("layerwise_pipeline")
        if not label:
            return None
        if label == SGLANG_KT_PIPELINE:
            return SGLANG_KT_DRIVER
        return "stream" if "driver=stream" in label.split(",") else "host"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["forwards"] = [asdict(f) for f in self.forwards]
        d["measured_ms"] = round(self.measured_ms, 3)
        d["extrapolated_ms"] = round(self.extrapolated_ms, 3)
        d["extrapolation"] = (
            f"{self.layers_run} consecutive MoE decoder layers measured; per forward, mean MoE time x "
            f"{self.model_moe_layers} MoE layers + mean attention time x {self.model_layers} layers "
            "(dense layers' MLPs not run)"
        )
        d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PathRun":
        fw = tuple(
            ForwardRecord(
                f["tokens"],
                f["prefix"],
                f["path"],
                tuple(f["layer_ms"]),
                tuple(f["attn_ms"]),
                tuple(f["moe_ms"]),
                int(f.get("attn_peak_bytes", 0)),
                int(f.get("moe_peak_bytes", 0)),
            )
            for f in d["forwards"]
        )
        keys = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k not in ("forwards", "notes")}
        return cls(forwards=fw, notes=tuple(d.get("notes", ())), **keys)


def runs_in_results(results: dict) -> Iterator[tuple[dict, list[PathRun]]]:
    """(request, runs) for each model's result in a results dict: one `PathsResult.to_dict()` or a
    results file `{machine, results: [{request, runs, ...}]}`. Runs recorded before `buffer_tokens`
    existed get it from their request (the stack is sized for the largest chunk or sweep size)."""
    for blob in results.get("results", [results]):
        req = blob.get("request") or {}
        rows = max(list(req.get("chunks", ())) + list(req.get("sweep", ())) + [0])
        runs = [PathRun.from_dict(r) for r in blob.get("runs", ())]
        yield req, [r if r.buffer_tokens or not rows else replace(r, buffer_tokens=rows) for r in runs]
