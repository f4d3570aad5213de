"""Hold the cost model to path-runner records (`kttune.runner.result.PathRun`, read by attribute: the
record is the runner's document, this module needs no torch).

- Per forward: the cost model's time of one decoder layer on the path the forward took (MoE layer on
  that path + attention + dense matmuls, `kttune.cost.prefill`) against the runner's mean measured
  layer time. Errors per path, raw and with a calibration (`kttune.calibration.entries`).
- Crossover: the forward size where layerwise becomes no slower than hybrid, measured (from forced
  single-forward runs on both paths, interpolated in log tokens) against `crossover_tokens`.
- Transfer: the forwards as `kttune.calibration.transfer.TransferPoint`s.

The memory model against the runner's measured peaks is `kttune.runner.memory` (its runner-only
terms come from the runner's own kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from typing import Any

from kttune.calibration.entries import Calibration
from kttune.calibration.transfer import MeasuredForward, TransferPoint
from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import hybrid_moe_layer, layerwise_moe_layer
from kttune.memory.vram import EXPAND_EVERY_PREFIX

# A path-runner record (kttune.runner.result.PathRun / ForwardRecord), read by attribute.
PathRun = Any
ForwardRecord = Any


def launch_config(run: PathRun) -> LaunchConfig:
    return LaunchConfig(
        method=run.method,
        tp=run.tp,
        num_gpu_experts=run.gpu_experts,
        chunked_prefill_size=run.chunk,
        gpu_prefill_token_threshold=run.threshold,
        max_total_tokens=max(65536, run.prompt_tokens),
        cpuinfer_threads=run.cpuinfer or 1,
        threadpool_count=1,
    )


@dataclass(frozen=True)
class ForwardPoint(MeasuredForward):
    """One forward of one run: the features a calibration needs, and the measured and predicted
    per-layer times (ms)."""

    measured_ms: float
    predicted_ms: float  # raw cost model, one decoder layer
    predicted_moe_ms: float
    predicted_other_ms: float

    def to_dict(self) -> dict:
        return self.__dict__.copy()


# The K layers of a forward are the same shapes doing the same work: when the slowest takes more
# than this many times the fastest, something outside the path ran in it (a kernel module loaded
# on first use, another process); such a forward is left out of the comparison and named.
DISTURBED_LAYER_SPREAD = 3.0


def disturbed(f: ForwardRecord) -> bool:
    return len(f.layer_ms) > 1 and min(f.layer_ms) > 0 and max(f.layer_ms) > DISTURBED_LAYER_SPREAD * min(f.layer_ms)


def disturbed_forwards(runs: list[PathRun]) -> list[str]:
    """One line per forward `forward_points` leaves out."""
    return [
        f"L={r.prompt_tokens} chunk={r.chunk} n={r.gpu_experts}{' forced ' + r.forced_path if r.forced_path else ''}: "
        f"forward of {f.tokens} tokens after {f.prefix}, {f.path}, layers "
        + "/".join(f"{x:.0f}" for x in f.layer_ms)
        + f" ms (over {DISTURBED_LAYER_SPREAD:g}x apart): left out"
        for r in runs
        for f in r.forwards
        if disturbed(f)
    ]


def forward_points(run: PathRun, c: Components) -> list[ForwardPoint]:
    """Every forward of the run but the disturbed ones (`disturbed`)."""
    cfg = launch_config(run)
    out = []
    for f in run.forwards:
        if disturbed(f):
            continue
        layer = layerwise_moe_layer(c, cfg, f.tokens) if f.path == "layerwise" else hybrid_moe_layer(c, cfg, f.tokens)
        other = c.layer_other_ms(f.tokens, f.prefix, EXPAND_EVERY_PREFIX)
        out.append(
            ForwardPoint(
                run.model,
                run.method,
                f.path,
                f.tokens,
                f.prefix,
                run.gpu_experts,
                sum(f.layer_ms) / len(f.layer_ms),
                layer.total_ms + other,
                layer.total_ms,
                other,
            )
        )
    return out


def layer_terms(c: Components, cfg: LaunchConfig, tokens: int, path: str) -> dict[str, float]:
    """The raw cost model's correctable parts of one MoE layer (`kttune.calibration.transfer.TERMS`):
    hybrid, the overlapped expert time max(CPU, GPU) and the copies with their sync; layerwise, the
    load and the GPU MoE. `c` must carry no calibration."""
    if path == "layerwise":
        lt = layerwise_moe_layer(c, cfg, tokens)
        return {"fixed_ms": 1.0, "load": lt.load_ms, "gpu_moe": lt.gpu_ms}
    lt = hybrid_moe_layer(c, cfg, tokens)
    experts = max(lt.cpu_ms, lt.gpu_ms)
    return {"fixed_ms": 1.0, "experts": experts, "copies": lt.total_ms - experts}


def transfer_points(run: PathRun, c: Components) -> list:
    """Every forward of the run but the disturbed ones as `kttune.calibration.transfer.TransferPoint`s: the
    measured layer time, the correctable parts (`layer_terms`) and the rest (attention, dense)."""
    cfg = launch_config(run)
    return [
        TransferPoint(
            run.model,
            run.method,
            f.path,
            f.tokens,
            f.prefix,
            run.gpu_experts,
            run.cpuinfer,
            sum(f.layer_ms) / len(f.layer_ms),
            c.layer_other_ms(f.tokens, f.prefix, EXPAND_EVERY_PREFIX),
            layer_terms(c, cfg, f.tokens, f.path),
        )
        for f in run.forwards
        if not disturbed(f)
    ]


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas if meas > 0 else float("nan")


def mape(pairs: list[tuple[float, float]]) -> float | None:
    xs = [ape(p, m) for p, m in pairs if m > 0]
    return sum(xs) / len(xs) if xs else None


def held_out_errors(points: list[ForwardPoint]) -> dict:
    """Per path: the raw MAPE over all points and the leave-one-out calibrated MAPE (each point
    predicted by the calibration of its method and path fitted on every other point), pooled over
    methods weighted by points; and per (method, path) the calibration entries themselves."""
    cal = Calibration.fit([p.to_dict() for p in points])
    out: dict = {"entries": cal.to_dicts()}
    for path in sorted({p.path for p in points}):
        es = [e for e in cal.entries if e.path == path]
        n = sum(e.points for e in es)
        held = [e for e in es if e.held_out_mape is not None]
        out[path] = {
            "points": n,
            "mape_raw": mape([(p.predicted_ms, p.measured_ms) for p in points if p.path == path]),
            "mape_calibrated_held_out": (sum(e.held_out_mape * e.points for e in held) / sum(e.points for e in held))
            if held
            else None,
        }
    return out


def measured_crossover(pairs: list[tuple[int, float, float]]) -> int | None:
    """(tokens, hybrid ms, layerwise ms) per forward size -> the size where layerwise - hybrid changes
    sign, interpolated linearly in log(tokens); None when it does not in the range."""
    pairs = sorted(pairs)
    if not pairs:
        return None
    if pairs[0][2] <= pairs[0][1]:
        return pairs[0][0]
    for (m0, h0, l0), (m1, h1, l1) in zip(pairs, pairs[1:]):
        d0, d1 = l0 - h0, l1 - h1
        if d0 > 0 >= d1:
            f = d0 / (d0 - d1)
            return int(round(math.exp(math.log(m0) + f * (math.log(m1) - math.log(m0)))))
    return None


def predicted_crossover(c: Components, run: PathRun, hi: int = 65536) -> int | None:
    """The smallest forward size (1-token resolution) at which the model's layerwise MoE layer is no
    slower than its hybrid one (`crossover_tokens` answers in steps of 64); None if never up to hi."""
    cfg = launch_config(run)
    if not c.method.layerwise:
        return None
    return smallest_forward_where(
        lambda m: layerwise_moe_layer(c, cfg, m).total_ms <= hybrid_moe_layer(c, cfg, m).total_ms, hi
    )


def smallest_forward_where(lw_wins, hi: int = 65536) -> int | None:
    """The smallest forward size in 1..hi for which `lw_wins(size)` holds, by bisection (layerwise
    minus hybrid falls with the size); None if it does not hold at `hi`."""
    if not lw_wins(hi):
        return None
    if lw_wins(1):
        return 1
    a, b = 1, hi
    while b - a > 1:
        mid = (a + b) // 2
        a, b = (a, mid) if lw_wins(mid) else (mid, b)
    return b
