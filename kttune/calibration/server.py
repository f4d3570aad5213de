"""Compare what a running server measured with what the cost model predicted, and turn the
differences into calibration entries (kttune.calibration.entries: the profile's `calibration` list, in
the path runner's form: a factor on the predicted MoE-layer time per path and method). Pure.

Give it the raw cost model (a profile without calibration entries): the factors are relative to it.

- hybrid / layerwise (applied): from the TTFT of prompts whose forwards all take one path, the MoE
  part is what is left after the predicted attention, dense and per-forward time (floored at 10% of
  the TTFT); factor = geometric mean over those prompts of observed / predicted MoE time. For
  layerwise, KT's own lines are better evidence: `prepare weight` + `compute` of one MoE layer is its
  whole MoE time, so when the log has them the factor is the geometric mean of those per-layer sums
  against the predicted layer time.
- layerwise:load / layerwise:compute (recorded, not applied): median logged part against the
  predicted load and GPU compute of one MoE layer.
- Prompts that mix paths (full layerwise chunks and a hybrid tail) are compared, not fitted.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import layerwise_load_ms, layerwise_moe_layer, prefill_forwards, prompt_forwards
from kttune.calibration.entries import server_entry
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
    predicted_ms: float  # whole prefill
    measured_ms: float  # median TTFT over repeats
    samples: int
    predicted_moe_ms: float = 0.0  # the MoE part of predicted_ms

    @property
    def observed_moe_ms(self) -> float:
        """Measured minus the predicted non-MoE time, floored at 10% of the measurement."""
        return max(self.measured_ms - (self.predicted_ms - self.predicted_moe_ms), 0.1 * self.measured_ms)

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
    corrections: tuple[
        dict, ...
    ]  # kttune.calibration.entries.CalibrationEntry.to_dict, as the JSON and the profile hold them


def predicted_paths(comp: Components, cfg: LaunchConfig, prompt_tokens: int) -> tuple[str, ...]:
    return tuple(path for path, _, _ in prompt_forwards(comp, cfg, prompt_tokens))


def _pairs(records: tuple[LayerwiseRecord, ...]) -> list[tuple[float, float]]:
    """(prepare, compute) ms of each MoE layer, pairing a compute line with the prepare line of the
    same layer just before it."""
    out, pending = [], {}
    for r in records:
        if r.kind == "prepare":
            pending[r.layer] = r.ms
        elif r.layer in pending:
            out.append((pending.pop(r.layer), r.ms))
    return out


def compare(
    comp: Components, cfg: LaunchConfig, measured: list[PromptMeasurement], model_name: str = "", created: str = ""
) -> Comparison:
    checks = []
    for m in measured:
        if not m.ttft_ms:
            continue
        fw = prefill_forwards(comp, cfg, m.prompt_tokens)
        checks.append(
            LengthCheck(
                m.prompt_tokens,
                tuple(f.path for f in fw),
                sum(f.total_ms for f in fw),
                statistics.median(m.ttft_ms),
                len(m.ttft_ms),
                sum(f.moe_ms for f in fw),
            )
        )
    cfg_detail = {
        "num_gpu_experts": cfg.num_gpu_experts,
        "chunked_prefill_size": cfg.chunked_prefill_size,
        "gpu_prefill_token_threshold": cfg.gpu_prefill_token_threshold,
        "cpuinfer_threads": cfg.cpuinfer_threads,
        "tp": cfg.tp,
    }
    method = cfg.method

    def entry(path: str, ratios: list[float], raw_mape: float | None, detail: dict) -> dict:
        factor = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        return server_entry(
            method, path, factor, len(ratios), raw_mape, model_name, created, {"config": cfg_detail, **detail}
        ).to_dict()

    out: list[dict] = []
    # per-layer evidence from KT's log: layerwise forwards of one size
    layer_ratios, loads, computes, load_pred, comp_pred = [], [], [], layerwise_load_ms(comp, cfg)[0], []
    for m in measured:
        sizes = {n for path, n, _ in prompt_forwards(comp, cfg, m.prompt_tokens) if path == "layerwise"}
        pairs = _pairs(m.layerwise)
        if len(sizes) != 1 or not pairs:
            continue
        size = sizes.pop()
        lt = layerwise_moe_layer(comp, cfg, size)
        for prep, cmp_ms in pairs:
            if lt.total_ms > 0 and prep + cmp_ms > 0:
                layer_ratios.append((prep + cmp_ms) / lt.total_ms)
            loads.append(prep)
            computes.append(cmp_ms)
            comp_pred.append(lt.gpu_ms)
    for path in ("hybrid", "layerwise"):
        own = [c for c in checks if c.single_path == path and c.predicted_moe_ms > 0 and c.measured_ms > 0]
        mape = sum(abs(c.predicted_ms - c.measured_ms) / c.measured_ms for c in own) / len(own) if own else None
        ttft = {str(c.prompt_tokens): c.observed_moe_ms / c.predicted_moe_ms for c in own}
        if path == "layerwise" and layer_ratios:
            out.append(
                entry(
                    path,
                    layer_ratios,
                    mape,
                    {
                        "from": "KT layerwise log lines (prepare weight + compute per MoE layer)",
                        "ttft_moe_ratios": ttft,
                    },
                )
            )
        elif own:
            out.append(
                entry(
                    path,
                    [c.observed_moe_ms / c.predicted_moe_ms for c in own],
                    mape,
                    {"from": "TTFT less the predicted attention, dense and per-forward time", "ttft_moe_ratios": ttft},
                )
            )
    parts = []
    if loads and load_pred > 0:
        parts.append(PartCheck("load", load_pred, statistics.median(loads), len(loads)))
        out.append(
            entry(
                "layerwise:load",
                [x / load_pred for x in loads if x > 0] or [1.0],
                None,
                {"from": "KT prepare weight lines", "predicted_ms": load_pred},
            )
        )
    if computes and comp_pred and min(comp_pred) > 0:
        parts.append(PartCheck("compute", statistics.median(comp_pred), statistics.median(computes), len(computes)))
        out.append(
            entry(
                "layerwise:compute",
                [x / p for x, p in zip(computes, comp_pred) if x > 0] or [1.0],
                None,
                {"from": "KT compute lines"},
            )
        )
    return Comparison(tuple(checks), tuple(parts), tuple(out))
