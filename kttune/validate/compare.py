"""Compare what a running server measured with what the cost model predicted, and turn the
differences into calibration entries (kttune.hw.calibration). Pure: measurements in, results out.

- TTFT of a prompt whose forwards all take one path corrects that path's whole-forward prediction
  ("prefill" part): factor = geometric mean over such prompts of measured / predicted.
- KT's `prepare weight` and `compute` lines correct the layerwise load and compute per MoE layer
  ("load" and "compute" parts): factor = median logged / predicted.
- Prompts that mix paths (full layerwise chunks and a hybrid tail) are compared, not used to fit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import chunks_of, forward_path, layerwise_load_ms, prefill_time_ms
from kttune.hw.calibration import Calibration
from kttune.validate.logs import LayerwiseRecord


@dataclass(frozen=True)
class PromptMeasurement:
    """What one prompt length measured on the server: TTFT of each repeat (ms) and the KT
    layerwise lines logged while those requests ran."""

    prompt_tokens: int
    ttft_ms: tuple[float, ...]
    layerwise: tuple[LayerwiseRecord, ...] = ()
    server_prompt_tokens: int | None = None  # what the server reported (meta_info.prompt_tokens)


@dataclass(frozen=True)
class LengthCheck:
    prompt_tokens: int
    paths: tuple[str, ...]  # the path of each forward, in order
    predicted_ms: float
    measured_ms: float  # median TTFT over repeats
    samples: int

    @property
    def ratio(self) -> float:
        return self.measured_ms / self.predicted_ms if self.predicted_ms > 0 else float("inf")

    @property
    def single_path(self) -> str | None:
        return self.paths[0] if len(set(self.paths)) == 1 else None


@dataclass(frozen=True)
class PartCheck:
    """A layerwise part per MoE layer: logged median against predicted (ms)."""

    part: str  # "load" | "compute"
    predicted_ms: float
    measured_ms: float
    samples: int

    @property
    def ratio(self) -> float:
        return self.measured_ms / self.predicted_ms if self.predicted_ms > 0 else float("inf")


@dataclass(frozen=True)
class Comparison:
    lengths: tuple[LengthCheck, ...]
    parts: tuple[PartCheck, ...]
    corrections: tuple[Calibration, ...]


def predicted_paths(comp: Components, cfg: LaunchConfig, prompt_tokens: int) -> tuple[str, ...]:
    return tuple(forward_path(comp, cfg, n) for n in chunks_of(prompt_tokens, cfg.chunked_prefill_size))


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def compare(comp: Components, cfg: LaunchConfig, measured: list[PromptMeasurement], model_name: str = "",
            created: str = "") -> Comparison:
    checks = []
    for m in measured:
        if not m.ttft_ms:
            continue
        checks.append(LengthCheck(m.prompt_tokens, predicted_paths(comp, cfg, m.prompt_tokens),
                                  prefill_time_ms(comp, cfg, m.prompt_tokens), statistics.median(m.ttft_ms), len(m.ttft_ms)))
    detail_cfg = {"num_gpu_experts": cfg.num_gpu_experts, "chunked_prefill_size": cfg.chunked_prefill_size,
                  "gpu_prefill_token_threshold": cfg.gpu_prefill_token_threshold, "cpuinfer_threads": cfg.cpuinfer_threads,
                  "tp": cfg.tp}
    out: list[Calibration] = []
    for path in ("hybrid", "layerwise"):
        own = [c for c in checks if c.single_path == path and c.predicted_ms > 0 and c.measured_ms > 0]
        if own:
            out.append(Calibration(path=path, method=cfg.method, factor=_geomean([c.ratio for c in own]), source="server",
                                   part="prefill", n=sum(c.samples for c in own), model=model_name, created=created,
                                   detail={"config": detail_cfg, "ratios": {str(c.prompt_tokens): c.ratio for c in own}}))
    parts = []
    load_pred = layerwise_load_ms(comp, cfg)[0]
    prepares = [r.ms for m in measured for r in m.layerwise if r.kind == "prepare"]
    if prepares and load_pred > 0:
        parts.append(PartCheck("load", load_pred, statistics.median(prepares), len(prepares)))
    # compute lines: predicted for the forward size they ran at, known when a prompt's layerwise
    # forwards all have one size (full chunks)
    ratios, pred_c, meas_c = [], [], []
    for m in measured:
        sizes = {n for n in chunks_of(m.prompt_tokens, cfg.chunked_prefill_size) if forward_path(comp, cfg, n) == "layerwise"}
        comps = [r.ms for r in m.layerwise if r.kind == "compute"]
        if len(sizes) == 1 and comps:
            p = comp.gpu_moe_ms(sizes.pop(), comp.model.num_experts)
            if p > 0:
                ratios += [x / p for x in comps]
                pred_c.append(p)
                meas_c += comps
    if ratios:
        parts.append(PartCheck("compute", statistics.median(pred_c), statistics.median(meas_c), len(ratios)))
    for pc in parts:
        factor = pc.ratio if pc.part == "load" else statistics.median(ratios)
        if factor > 0 and math.isfinite(factor):
            out.append(Calibration(path="layerwise", method=cfg.method, factor=factor, source="server", part=pc.part,
                                   n=pc.samples, model=model_name, created=created, detail={"config": detail_cfg}))
    return Comparison(tuple(checks), tuple(parts), tuple(out))
