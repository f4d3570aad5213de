"""A profile's layerwise pipeline curves re-expressed in another configuration the probe timed.

The pipeline probe times every configuration it tries on the full layer (the full point's `configs`)
and the curve's points in one of them: sglang-kt 0.7.2's loop since 2026-12-05, the fastest before
(docs/probe.md#the-pipeline). `in_config` gives the curves as a probe timing another of them would
have recorded: every point scaled by that configuration's full layer over the curve's (the slope
stays the probe's). The benchmarks use it to compare a quick probe's curves with those the quick
probe recorded before it timed sglang-kt's loop (benchmarks/bench_pipeline_loop.py).
"""

from __future__ import annotations

from dataclasses import replace

from kttune.hw.profile import Curve, HardwareProfile


def in_config(profile: HardwareProfile, label: str, keep_configs: bool = True) -> HardwareProfile:
    """`profile` with every pipeline curve whose full point timed `label` (a
    `kttune.runner.pipeline.PipelineConfig.label`) timed in it instead; with `keep_configs` False
    the full points forget the other configurations (a probe that timed `label` alone). Raises
    KeyError for a curve whose full point did not time `label`."""
    from kttune.runner.pipeline import PipelineConfig

    cfg = PipelineConfig.from_label(label)

    def one(c: Curve) -> Curve:
        if c.kind != "pipeline" or not c.points or "configs" not in c.points[-1].extra:
            return c
        full = c.points[-1].extra
        k = full["configs"][label]["layer_ms"] / full["layer_ms"]
        pts = []
        for q in c.points:
            extra = {a: b for a, b in q.extra.items() if a != "configs" or keep_configs}
            extra |= {"slots": cfg.slots, "group": cfg.group, "driver": cfg.driver}
            if "layer_ms" in q.extra:
                extra["layer_ms"] = q.extra["layer_ms"] * k
            lo, hi = (None if v is None else v * k for v in (q.t_ms_p10, q.t_ms_p90))
            pts.append(replace(q, t_ms=q.t_ms * k, t_ms_p10=lo, t_ms_p90=hi, extra=extra))
        return replace(c, points=tuple(pts))

    return replace(profile, curves=tuple(one(c) for c in profile.curves))
