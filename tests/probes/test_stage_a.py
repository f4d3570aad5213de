"""The stage A probe times kt-kernel's writer (what it writes is checked in
tests/kernels/test_expert_weights.py)."""

from __future__ import annotations

import statistics
import pytest

from kttune.kernels.expert_weights import write_nbytes
from kttune.probes import common
from kttune.probes import stage_a as sa
from kttune.probes.inventory import collect_cpu
from kttune.units import MIB


@pytest.mark.kt
def test_stage_a_probe_writes_curves_from_kt_kernel(kt):
    import torch

    cpu = collect_cpu()
    opts = sa.StageAOptions(
        hidden=1024, inters=(256, 512), threads=(1,), layer_bytes=16 * MIB, warmup=1, repeats=3, min_total_s=0.0
    )
    curves = sa.probe_stage_a(opts, cpu, cores=1, numa_ids=[0], quick=True)
    # every layerwise method this build has a writer for (kt-kernel's AVX2 build has no FP8 per channel)
    runnable = {t.method for t in sa.plan_stage_a(opts, cpu, 1, [0], True).tasks}
    assert {"BF16", "FP8", "RAWINT4"} <= runnable <= set(sa.STAGE_A_METHODS)
    assert {c.params["method"] for c in curves} == runnable
    for c in curves:
        assert c.kind == "stage_a_write" and c.x_unit == "bytes"
        assert c.backend == f"kt-kernel:{kt.variant}" and c.params["threads"] == 1
        assert [p.x for p in c.points] == [write_nbytes(c.params["method"], 1024, i) for i in (256, 512)]
        for p in c.points:
            assert p.t_ms > 0 and p.extra["kernel"] == c.params["kernel"]
            assert p.extra["pinned"] is torch.cuda.is_available()  # pinned slot only with CUDA


def test_the_writes_cycle_over_more_than_the_last_level_cache():
    """A server streams a layer of GBs: the probe's source is 4x the last-level cache (2x in a quick
    probe), the former 256 MiB / 64 MiB where that is more or the cache is unknown."""
    from kttune.probes.run import ProbeOptions, stage_a_options

    l3 = 307200 * 1024  # the 16-core H200 box's
    assert stage_a_options(ProbeOptions(), llc_bytes=l3).layer_bytes == 4 * l3
    assert stage_a_options(ProbeOptions(quick=True), llc_bytes=l3).layer_bytes == 2 * l3
    assert stage_a_options(ProbeOptions(), llc_bytes=32 * MIB).layer_bytes == 256 * MIB
    # a cache of unknown size (0; None reads this host's, whatever its size)
    assert stage_a_options(ProbeOptions(quick=True), llc_bytes=0).layer_bytes == 64 * MIB


@pytest.mark.kt
def test_the_probe_records_the_source_it_cycled_over(kt):
    """Small experts fill the cycle with many of them (up to MAX_CYCLE_EXPERTS): a 96 MiB source of
    0.75 MiB experts is 128 of them, past the former cap of 64."""
    cpu = collect_cpu()
    opts = sa.StageAOptions(
        hidden=1024,
        inters=(128,),
        methods=("BF16",),
        threads=(1,),
        layer_bytes=96 * MIB,
        warmup=1,
        repeats=2,
        min_total_s=0.0,
    )
    (curve,) = sa.probe_stage_a(opts, cpu, cores=1, numa_ids=[0], quick=True)
    (pt,) = curve.points
    assert pt.extra["layer_experts"] == 128 and pt.extra["source_bytes"] >= 96 * MIB


@pytest.mark.kt
def test_a_write_timed_again_is_the_same_write(kt):
    """A scattered stage A point is timed again on its writer layer built anew
    (docs/probe.md#disturbed-points): the second timing writes the same bytes of the same expert
    size from the same source through the same kt-kernel class."""
    import torch

    cpu = collect_cpu()
    opts = sa.StageAOptions(
        hidden=1024, inters=(256,), methods=("FP8",), threads=(1,), layer_bytes=16 * MIB, warmup=1, repeats=3
    )
    (curve,) = sa.probe_stage_a(opts, cpu, cores=1, numa_ids=[0], quick=True)
    (first,) = curve.points
    hosts: dict = {}
    task = sa.StageATask("FP8", 1, 1, inters=(256,))
    pinned = bool(torch.cuda.is_available())
    again = sa._time_write(task, first.extra["inter"], first.extra["layer_experts"], hosts, opts, cpu, kt, [0], pinned)
    assert again.x == first.x and again.t_ms > 0
    # the retime's record (every timing, a failed repeat) is the probe's bookkeeping, on the first
    # point only when the CI host's noise scattered it: the write itself must be the same
    bookkeeping = {"timings", "retime_error"}
    assert {k: v for k, v in again.extra.items() if k not in bookkeeping} == {
        k: v for k, v in first.extra.items() if k not in bookkeeping
    }


@pytest.mark.kt
def test_the_probe_times_a_write_the_thread_law_names_again(kt, monkeypatch):
    """Wired into the probe: once a method's counts are measured, a write the law names is timed again
    on a writer layer of its own count (real kt-kernel) and keeps every timing. The law is pointed at
    the 1-thread curve's first point, since a 2-core VM's counts do not break it."""
    named = []

    def law(curves):
        one = next(c for c in curves if c.params["threads"] == 1)
        named.append((one.params["method"], sorted(c.params["threads"] for c in curves)))
        return {1: [one.points[0]]}

    monkeypatch.setattr(common, "slower_than_larger_pools", law)
    cpu = collect_cpu()
    opts = sa.StageAOptions(
        hidden=1024,
        inters=(256,),
        methods=("BF16", "FP8"),
        threads=(1, 2),
        layer_bytes=16 * MIB,
        warmup=1,
        repeats=3,
        min_total_s=0.0,
    )
    rep = common.NullReporter()
    curves = sa.probe_stage_a(opts, cpu, rep, cores=2, numa_ids=[0], quick=True)
    assert named == [("BF16", [1, 2]), ("FP8", [1, 2])]  # once per method, over both counts
    for c in curves:
        (p,) = c.points
        if c.params["threads"] == 1:
            assert len(p.extra["timings"]) >= 2 and p.t_ms == statistics.median(t["ms"] for t in p.extra["timings"])
            assert p.extra["inter"] == 256 and p.extra["kernel"]
    assert sum("slower than a larger pool allows" in n for n in rep.notes) == 2


@pytest.mark.kt
def test_the_bytes_stage_a_leaves_behind_are_the_writer_layers_of_classes_kt_kernel_cannot_free(kt, monkeypatch):
    """`kept_write_bytes`: per curve and expert width, the cycle's experts in the method's source
    format where the writer's class leaks in the loaded kt-kernel; nothing for a version that frees it."""
    from dataclasses import replace

    from kttune.kernels.expert_weights import expert_nbytes
    from kttune.kernels.kt_moe import kt_class_name
    from kttune.probes import stage_a as sa
    from kttune.probes.inventory import collect_cpu
    from kttune.spec.kt_classes import kt_class_leaks

    cpu = collect_cpu()
    opts = sa.StageAOptions(hidden=1024, inters=(256, 768), methods=("BF16",), threads=(1, 2), layer_bytes=64 << 20)
    plan = sa.plan_stage_a(opts, cpu, 2, [0], quick=True)
    leaks = kt_class_leaks(kt_class_name(kt, "BF16", cpu.isa), kt.version)
    per_width = [sa.cycle_experts(opts, "BF16", i) * expert_nbytes("BF16", 1024, i) for i in (256, 768)]
    assert all(64 << 20 <= b < (64 << 20) + expert_nbytes("BF16", 1024, 768) for b in per_width)  # the cycle
    assert sa.kept_write_bytes(plan, opts, cpu) == (len(plan.tasks) * sum(per_width) if leaks else 0)
    monkeypatch.setattr(sa, "load_kt_kernel", lambda: replace(kt, version="99.0.0"))
    assert sa.kept_write_bytes(plan, opts, cpu) == 0


@pytest.mark.kt
def test_the_probe_times_a_write_slower_than_a_larger_one_again(kt, monkeypatch):
    """Wired into the probe: a write the curve's larger write shows to be off
    (`slower_than_a_larger_write`) is timed again on the same writer (real kt-kernel) and keeps the
    median of its timings; the rule is pointed at each curve's smaller write, since a quiet VM's
    writes do not break it."""
    from kttune.hw.profile import Curve

    seen = []

    def rule(curve: Curve):
        seen.append(len(curve.points))
        return [min(curve.points, key=lambda p: p.x)]

    monkeypatch.setattr(sa, "slower_than_a_larger_write", rule)
    opts = sa.StageAOptions(
        hidden=1024,
        inters=(128, 256),
        methods=("BF16",),
        threads=(1,),
        layer_bytes=16 * MIB,
        warmup=1,
        repeats=3,
        min_total_s=0.0,
    )
    (curve,) = sa.probe_stage_a(opts, collect_cpu(), common.NullReporter(), cores=2, numa_ids=[0], quick=True)
    assert seen == [2]
    small = min(curve.points, key=lambda p: p.x)
    assert len(small.extra["timings"]) >= 2  # timed again whatever its own spread
    assert small.t_ms == statistics.median(t["ms"] for t in small.extra["timings"])
