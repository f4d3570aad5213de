"""Deriving profiles: the measured 16-core box scaled to the measured 32-core two-GPU box must agree
with what was measured there (the judged 1.5x), and the derive rules obey their laws."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from kttune.errors import UserError
from kttune.hw.derive import (
    Change,
    CpuTarget,
    allreduce_ms,
    derive_profile,
    scale_cpu_time,
    serial_fraction,
    serial_fractions,
)
from kttune.hw.gpu_table import GPUS, gpu_spec
from kttune.hw.profile import profile_from_dict, profile_to_dict
from kttune.hw.registry import load_shipped

SRC = "h200-pcie5-xeon-amx-16c"
DST = "h200x2-pcie5-xeon-amx-32c"


def scaling_check() -> list[tuple[str, int, float, float, float]]:
    """(method, threads, tokens, predicted ms, measured ms) at every CPU MoE shape and thread count
    both measured profiles hold, the 16-core one scaled to 32 cores."""
    src, dst = load_shipped(SRC), load_shipped(DST)
    cpu = dst.inventory.cpu
    derived = derive_profile(src, Change(cpu=CpuTarget(cores=cpu.physical_cores, isa=cpu.isa))).profile
    rows = []
    for c in dst.curves_of("cpu_moe"):
        p = c.params
        if p["threads"] >= cpu.physical_cores:
            continue
        want = {k: p[k] for k in ("method", "threads", "hidden", "inter", "experts", "top_k")}
        pred = derived.curves_of("cpu_moe", **want)
        if not pred:
            continue
        pts = {q.x: q.t_ms for q in pred[0].points}
        rows += [(p["method"], p["threads"], q.x, pts[q.x], q.t_ms) for q in c.points if q.x in pts]
    return rows


def test_16_core_box_scaled_to_32_cores_is_within_1_5x_of_its_measurement():
    rows = scaling_check()
    assert len(rows) >= 20  # five methods x five token counts at the shared shape
    worst = max(max(a / b, b / a) for *_, a, b in rows)
    assert worst <= 1.5, worst


def test_stage_a_scaled_to_32_cores_is_within_1_5x():
    src, dst = load_shipped(SRC), load_shipped(DST)
    derived = derive_profile(src, Change(cpu=CpuTarget(cores=32, isa=dst.inventory.cpu.isa))).profile
    n = 0

    def key(q):  # stage A points carry the layer shape they were written for
        return q.x, q.extra.get("hidden"), q.extra.get("inter"), q.extra.get("layer_experts")

    for c in dst.curves_of("stage_a_write", threads=31):
        pred = {
            key(q): q.t_ms
            for cc in derived.curves_of("stage_a_write", method=c.params["method"], threads=31)
            for q in cc.points
        }
        for q in c.points:
            if key(q) in pred:
                n += 1
                assert 1 / 1.5 <= pred[key(q)] / q.t_ms <= 1.5, (c.params, key(q), pred[key(q)], q.t_ms)
    assert n >= 3


def test_serial_fraction_is_fitted_per_kernel_on_the_measured_sweep():
    """Each method's share is the fit of its own sweep: two kernels with known serial shares, one
    with many more points than the other, are each recovered (a pooled fit is the one with the
    most points), and the shipped box's values are shares."""
    from kttune.hw.profile import Curve, Point

    src = load_shipped(SRC)
    best, f = src.inventory.cpu.physical_cores - 1, 1.0

    def sweep(method, share, sizes):
        out = []
        for th in (best - 4, best - 2, best):
            pts = tuple(Point(x=x, t_ms=f + x * (share + (1 - share) * best / th)) for x in sizes)
            out.append(
                Curve(
                    "cpu_moe",
                    "tokens",
                    pts,
                    {"method": method, "threads": th, "hidden": 64, "inter": 32, "experts": 8, "top_k": 2},
                )
            )
        return out

    fixed = Curve(
        "cpu_moe",
        "tokens",
        (Point(x=1, t_ms=f),),
        {"method": "BF16", "threads": best, "hidden": 8, "inter": 8, "experts": 8, "top_k": 1},
    )
    only = _replace(
        src, curves=(fixed, *sweep("BF16", 0.3, (64, 128)), *sweep("FP8", 0.0, tuple(range(100, 2000, 100))))
    )
    s = serial_fractions(only)
    assert s["BF16"] == pytest.approx(0.3, abs=0.011) and s["FP8"] == pytest.approx(0.0, abs=0.011)
    assert s[""] < 0.1  # pooled: the many-point kernel's
    shipped = serial_fractions(src)
    assert {"BF16", "FP8", "RAWINT4", "FP8_PERCHANNEL"} <= set(shipped)
    assert all(0.0 <= v <= 0.8 for v in shipped.values())
    assert shipped[""] == serial_fraction(src)


def test_each_method_is_derived_with_its_own_serial_share():
    src = load_shipped(SRC)
    shares = serial_fractions(src)
    derived = derive_profile(src, Change(cpu=CpuTarget(cores=32))).profile
    from kttune.hw.derive import fixed_call_ms

    fixed = fixed_call_ms(src, "cpu_moe")
    checked = set()
    for c in src.curves_of("cpu_moe", threads=13):
        m = c.params["method"]
        (d,) = [
            x
            for x in derived.curves_of("cpu_moe", method=m, threads=29)
            if x.shape == c.shape and x.params.get("threadpools") == c.params.get("threadpools")
        ]
        for p, q in zip(c.points, d.points):
            want = scale_cpu_time(p.t_ms, shares[m], 13, 29, 1.0, 1.0, 0.0, fixed, cores_ratio=16 / 32)
            assert q.t_ms == pytest.approx(want, rel=1e-9)
        checked.add(m)
    assert {"BF16", "FP8_PERCHANNEL"} <= checked


@given(t=st.floats(0.01, 1e4), s=st.floats(0, 0.8, allow_subnormal=False), a=st.integers(1, 64), b=st.integers(1, 256))
def test_more_threads_never_slower(t, s, a, b):
    lo, hi = sorted((a, b))
    assert scale_cpu_time(t, s, a, hi) <= scale_cpu_time(t, s, a, lo) + 1e-9


@given(x=st.floats(1e3, 1e10), n=st.integers(2, 8))
def test_allreduce_grows_with_gpus_and_bytes(x, n):
    assert allreduce_ms(x, n + 1, 50, 0.02) >= allreduce_ms(x, n, 50, 0.02)
    assert allreduce_ms(2 * x, n, 50, 0.02) >= allreduce_ms(x, n, 50, 0.02)
    assert allreduce_ms(x, 1, 50, 0.02) == 0


def test_derived_profile_is_labelled_curve_by_curve_and_round_trips():
    d = derive_profile(load_shipped(SRC), Change(gpu="rtx5090", n_gpus=2))
    p = d.profile
    assert all(c.params["label"] in ("measured", "scaled", "datasheet") for c in p.curves)
    assert {c.params["label"] for c in p.curves_of("gpu_moe")} == {"scaled"}
    assert {c.params["label"] for c in p.curves_of("cpu_moe")} == {"measured"}
    assert len(p.inventory.gpus) == 2 and p.inventory.gpus[0].vram_total_bytes == GPUS["rtx5090"].vram_bytes
    assert p.provenance.kind == "mixed"
    assert profile_from_dict(profile_to_dict(p)).curves == p.curves


def test_a_slower_gpu_is_slower_at_large_sizes():
    src = load_shipped(SRC)
    p = derive_profile(src, Change(gpu="rtx4090")).profile
    for a, b in zip(src.curves_of("gpu_gemm"), p.curves_of("gpu_gemm")):
        assert b.points[-1].t_ms > 2 * a.points[-1].t_ms
    h2d_src = [c for c in src.curves_of("h2d", pinned=True) if c.params["gpu"] == 0][0]
    h2d = [c for c in p.curves_of("h2d", pinned=True) if c.params["gpu"] == 0][0]
    assert h2d.points[-1].t_ms == pytest.approx(h2d_src.points[-1].t_ms * 2, rel=0.02)  # Gen4 is half of Gen5


def test_bad_change_is_a_user_error():
    with pytest.raises(UserError):
        gpu_spec("rtx9999")
    with pytest.raises(UserError):
        derive_profile(load_shipped(SRC), Change(n_gpus=0))


def test_allreduce_is_datasheet_without_a_measurement_and_grows_with_gpus():
    src = load_shipped(SRC)  # one GPU: nothing to fit
    two = derive_profile(src, Change(n_gpus=2)).profile.curves_of("allreduce")
    eight = derive_profile(src, Change(n_gpus=8)).profile.curves_of("allreduce")
    nv = derive_profile(src, Change(n_gpus=8, link="nvlink")).profile.curves_of("allreduce")
    assert two[0].params["label"] == "datasheet" and two[0].params["ranks"] == 2
    for a, b, c in zip(two[0].points, eight[0].points, nv[0].points):
        assert b.t_ms > a.t_ms and c.t_ms < b.t_ms
    assert not derive_profile(src, Change(n_gpus=1)).profile.curves_of("allreduce")


def test_a_measured_allreduce_is_fitted_and_moved_to_more_gpus():
    from dataclasses import replace as dc_replace

    from kttune.hw.profile import Curve, Point

    src = load_shipped(DST)  # two GPUs
    lat, bw = 0.025, 40.0  # ms per step, GB/s
    xs = [2.0**e for e in range(16, 30, 2)]
    meas = Curve(
        "allreduce",
        "bytes",
        tuple(Point(x=x, t_ms=allreduce_ms(x, 2, bw, lat)) for x in xs),
        {"ranks": 2, "link": "pcie", "dtype": "bf16"},
        backend="nccl",
    )
    src = dc_replace(src, curves=src.curves + (meas,))
    four = derive_profile(src, Change(n_gpus=4)).profile.curves_of("allreduce")[0]
    assert four.params["label"] == "scaled"
    for p in four.points:  # the ring model with the fitted latency and link, at 4 GPUs
        assert p.t_ms == pytest.approx(allreduce_ms(p.x, 4, bw, lat), rel=1e-6)


# ---- fixed costs stay fixed; only bandwidth and compute terms move (issue 22) ----------------------

from dataclasses import replace as _replace  # noqa: E402

from kttune.hw.curve_kinds import CURVE_KINDS, DERIVE_RULES, KINDS  # noqa: E402
from kttune.hw.derive import (  # noqa: E402
    fixed_part_ms,
    nccl_allreduce_ms,
    scale_copy_curve,
    scale_gpu_curve,
)
from kttune.hw.gpu_table import GpuSpec  # noqa: E402
from kttune.hw.profile import Curve, Point  # noqa: E402


def _gpu(hbm: float, tflops: float = 500.0) -> GpuSpec:
    return GpuSpec("x", "NVIDIA X", 80 * 10**9, hbm, tflops, 2 * tflops, 5, 16)


def _gemm_curve(fixed_ms: float, hbm_gbps: float, tflops: float, hidden: int = 4096, out: int = 4096) -> Curve:
    """A GEMM curve on a GPU of `hbm_gbps` and `tflops`: a fixed launch cost plus its roofline time."""
    pts = []
    for x in (1, 16, 256, 4096, 16384):
        flops, nbytes = 2 * x * hidden * out, 2 * (x * hidden + hidden * out + x * out)
        pts.append(Point(x=x, t_ms=fixed_ms + flops / (tflops * 1e9) + nbytes / (hbm_gbps * 1e6)))
    return Curve("gpu_gemm", "tokens", tuple(pts), {"hidden": hidden, "out": out})


def test_the_launch_bound_stage_c_keeps_its_time_on_a_slower_gpu():
    """Stage C on the H200 box takes 0.25 ms for 1 to 64 experts (kernel launches): on a 4090 one
    expert's repack stays within 10% of 0.25 ms, where the HBM ratio alone made it 1.14 ms; only
    the bandwidth part of the 64-expert batch (170 MB) grows."""
    src = load_shipped(SRC)
    meas = src.curves_of("stage_c_repack")[0]
    der = derive_profile(src, Change(gpu="rtx4090")).profile.curves_of("stage_c_repack")[0]
    for a, b in zip(meas.points, der.points):
        assert a.t_ms <= b.t_ms <= (1.1 if a.extra["experts"] <= 16 else 1.3) * a.t_ms
    assert fixed_part_ms(meas) > 0.9 * min(p.t_ms for p in meas.points)


@given(
    fixed=st.floats(0.0, 2.0, allow_subnormal=False),
    hbm=st.floats(200, 8000),
    more=st.floats(1.0, 10.0),
    tflops=st.floats(50, 2000),
)
def test_more_hbm_bandwidth_never_slows_a_gpu_curve_and_leaves_its_fixed_cost(fixed, hbm, more, tflops):
    c = _gemm_curve(fixed, hbm, tflops)
    faster = scale_gpu_curve(c, _gpu(hbm, tflops), _gpu(hbm * more, tflops))
    slower = scale_gpu_curve(c, _gpu(hbm, tflops), _gpu(hbm / more, tflops))
    f = fixed_part_ms(c)
    for p, q, r in zip(c.points, faster.points, slower.points):
        assert q.t_ms <= p.t_ms * (1 + 1e-9) <= r.t_ms * (1 + 1e-9)
        assert q.t_ms >= min(f, p.t_ms) * (1 - 1e-9)  # never below the fixed part


@given(t0=st.floats(0.001, 5.0), hbm=st.floats(200, 8000), ratio=st.floats(0.05, 20.0))
def test_a_constant_curve_is_all_fixed_cost_and_does_not_scale(t0, hbm, ratio):
    c = Curve("stage_c_repack", "bytes", tuple(Point(x=x, t_ms=t0) for x in (1e6, 1e7, 1e8)), {"method": "RAWINT4"})
    moved = scale_gpu_curve(c, _gpu(hbm), _gpu(hbm * ratio))
    copied = scale_copy_curve(_replace(c, kind="h2d"), ratio)
    for p in moved.points + copied.points:
        assert p.t_ms == pytest.approx(t0, rel=1e-6)


@given(ratio=st.floats(1.0, 8.0))
def test_a_faster_link_never_slows_a_copy(ratio):
    h2d = [c for c in load_shipped(SRC).curves_of("h2d", pinned=True) if c.params["gpu"] == 0][0]
    for p, q in zip(h2d.points, scale_copy_curve(h2d, ratio).points):
        assert q.t_ms <= p.t_ms * (1 + 1e-9)


def test_every_curve_kind_has_a_derive_rule_and_nothing_stale_passes_as_measured():
    assert set(CURVE_KINDS) == set(KINDS) and all(KINDS[k].derive in DERIVE_RULES for k in CURVE_KINDS)
    src = load_shipped(SRC)
    host_ram = Curve("host_ram", "tokens", (Point(x=4096, t_ms=10.0, extra={"reserved_bytes": 1}),), {"method": "BF16"})
    src = _replace(src, curves=src.curves + (host_ram,))
    cpu = derive_profile(src, Change(cpu=CpuTarget(cores=32))).profile
    gpu = derive_profile(src, Change(gpu="rtx4090")).profile
    assert not cpu.curves_of("host_ram") and gpu.curves_of("host_ram")[0].params["label"] == "measured"
    for p, changed in ((cpu, ("cpu", "cpu+gpu")), (gpu, ("gpu", "pcie", "cpu+gpu"))):
        assert all(c.params["label"] != "measured" for c in p.curves if KINDS[c.kind].depends_on in changed)
    # a pipeline measured on another machine is carried for its overlap ratio only
    assert {c.params.get("use") for c in gpu.curves_of("pipeline")} == {"overlap"}


def test_a_kind_without_a_row_is_refused_not_labelled_measured():
    """A curve of a kind the table does not hold (built in code: the reader refuses it in a file)
    stops the derive with one line naming the kind; it never reaches the derived profile."""
    src = load_shipped(SRC)
    odd = Curve("nvme_read", "bytes", (Point(x=4096, t_ms=1.0),), {})
    with pytest.raises(UserError, match="unknown curve kind 'nvme_read'"):
        derive_profile(_replace(src, curves=src.curves + (odd,)), Change(gpu="rtx4090"))


def test_stage_a_serial_share_pairs_only_points_of_the_same_layer():
    """Stage A points of one size come from layers of different depths (cache-resident or not):
    a sweep that scales perfectly with threads fits a serial share of 0, whatever other layer's
    point of the same size holds at the best thread count."""

    def curve(th: int, t: float, layer: int) -> Curve:
        return Curve(
            "stage_a_write",
            "bytes",
            (Point(x=9e6, t_ms=t, extra={"layer_experts": layer}),),
            {"method": "BF16", "threads": th},
        )

    src = load_shipped(SRC)
    fixed = Curve("stage_a_write", "bytes", (Point(x=1e5, t_ms=0.02),), {"method": "FP8", "threads": 15})
    sweep = (
        fixed,
        curve(15, 0.22, 8),
        curve(13, 0.02 + 0.20 * 15 / 13, 8),
        curve(11, 0.02 + 0.20 * 15 / 11, 8),
        curve(15, 0.40, 29),
    )
    only = _replace(src, curves=tuple(c for c in src.curves if c.kind != "stage_a_write") + sweep)
    assert serial_fraction(only, "stage_a_write") == 0.0


@given(n=st.integers(2, 7), x=st.floats(1, 2**30))
def test_nccl_allreduce_grows_with_gpus_and_bytes_and_a_barrier_costs_its_latency(n, x):
    for link in ("pcie", "nvlink"):
        assert nccl_allreduce_ms(x, n + 1, 40, link) >= nccl_allreduce_ms(x, n, 40, link)
        assert nccl_allreduce_ms(2 * x, n, 40, link) >= nccl_allreduce_ms(x, n, 40, link)
    assert nccl_allreduce_ms(4, 2, 40, "pcie") == pytest.approx((6.6 + 2 * 1.0) / 1e3, rel=0.01)


def test_the_32_core_box_scaled_down_to_16_cores_is_within_1_5x_of_the_16_core_box():
    """The other direction, held out the same way: the 32-core box has no thread sweep of its own,
    so its serial share is the default; every shared point of the 16-core box at 15 threads."""
    src, dst = load_shipped(DST), load_shipped(SRC)
    derived = derive_profile(src, Change(cpu=CpuTarget(cores=16, isa=dst.inventory.cpu.isa))).profile
    ratios = []
    for c in dst.curves_of("cpu_moe", threads=15):
        want = {k: c.params[k] for k in ("method", "threads", "hidden", "inter", "experts", "top_k")}
        for d in derived.curves_of("cpu_moe", **want):
            pts = {q.x: q.t_ms for q in d.points}
            ratios += [pts[q.x] / q.t_ms for q in c.points if q.x in pts]
    assert len(ratios) >= 20
    assert max(max(r, 1 / r) for r in ratios) <= 1.5


@settings(max_examples=25, deadline=None)
@given(bw=st.floats(20, 2000), more=st.floats(1.0, 8.0), cores=st.integers(4, 128))
def test_more_memory_bandwidth_never_slows_a_derived_cpu_curve(bw, more, cores):
    src = load_shipped(SRC)
    lo = derive_profile(src, Change(cpu=CpuTarget(cores=cores, mem_bandwidth_gbps=bw))).profile
    hi = derive_profile(src, Change(cpu=CpuTarget(cores=cores, mem_bandwidth_gbps=bw * more))).profile
    for a, b in zip(lo.curves, hi.curves):
        if a.kind in ("cpu_moe", "stage_a_write"):
            assert all(q.t_ms <= p.t_ms * (1 + 1e-9) for p, q in zip(a.points, b.points))


def test_the_attention_blocks_launch_cost_stays_and_its_work_scales_on_a_slower_gpu():
    """A block curve of 3 ms fixed cost plus its roofline work: on a 4090 the 16-token point (all
    launches) keeps its time within 5%, the 4096-token point (mostly work) grows."""
    from tests.cost.test_attention_block import block_curve

    from kttune.spec.loader import load_model

    src = load_shipped(SRC)
    c = block_curve(load_model("qwen3-30b-a3b"), 3.0, tflops=400.0)
    src = _replace(src, curves=tuple(x for x in src.curves if x.kind != "attention_block") + (c,))
    der = derive_profile(src, Change(gpu="rtx4090")).profile.curves_of("attention_block")[0]
    small, big = (der.points[0], c.points[0]), (der.points[-1], c.points[-1])
    assert small[1].t_ms <= small[0].t_ms <= 1.05 * small[1].t_ms
    assert big[0].t_ms > 1.5 * big[1].t_ms


# The 32-core box's own probes of models at their expert shapes (benchmarks/bench_tp_paths.sh, 28
# kt-kernel threads): shapes and a thread count neither shipped profile holds, held out of derive.
X2 = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-04-h200x2-pcie5-xeon-amx-32c"


def _real_shape_ratios(model: str, method: str, derived) -> list[float]:
    """Derived / measured kt-kernel MoE time at every point of `model`'s probe on the 32-core box from
    16 tokens, the derived time the mean of its 27- and 29-thread curves (the box ran 28)."""
    from kttune.cost.components import Components
    from kttune.hw.profile import load_profile
    from kttune.spec.loader import load_model

    (curve,) = load_profile(X2 / f"probe-{model}-x2.profile.json").curves_of("cpu_moe")
    spec = load_model(model, method)
    c = Components(derived, spec, method)
    return [
        (c.cpu_moe_ms(p.x, spec.num_experts, 27) + c.cpu_moe_ms(p.x, spec.num_experts, 29)) / 2 / p.t_ms
        for p in curve.points
        if p.x >= 16
    ]


def test_the_shared_share_scales_with_the_box_at_real_expert_shapes():
    """kt-kernel's FP8 and RAWINT4 MoE at DeepSeek-V3's and Kimi-K2's expert shapes on the measured
    32-core box, from the 16-core profile derived to it: within the scaled label's factor. Keeping the
    measured box's share that more threads did not shorten (Amdahl's serial share), they were
    1.56-1.90x and 1.63-2.26x slow (docs/derive.md#thread-scaling-inside-one-box-and-across-boxes)."""
    from dataclasses import replace

    from kttune.hw.derive import CPU_SCALED_ERROR

    src = load_shipped(SRC)
    dst = load_shipped(DST).inventory.cpu
    derived = replace(derive_profile(src, Change(cpu=CpuTarget(cores=dst.physical_cores))).profile, calibration=())
    for model, method in (("deepseek-v3", "FP8"), ("kimi-k2-thinking", "RAWINT4")):
        ratios = _real_shape_ratios(model, method, derived)
        assert len(ratios) >= 5
        assert all(1 / CPU_SCALED_ERROR <= r <= CPU_SCALED_ERROR for r in ratios), (model, ratios)


@given(
    t=st.floats(0.1, 1e3, allow_subnormal=False),
    s=st.floats(0.01, 0.8, allow_subnormal=False),
    th=st.integers(1, 64),
    k=st.floats(1.0, 8.0),
)
def test_a_larger_box_shortens_only_the_shared_share(t, s, th, k):
    """On the same box (cores ratio 1) the shared share stays as measured; on a box k times larger it
    is 1/k of it, and the parallel share is unchanged by the box."""
    same = scale_cpu_time(t, s, th, th)
    larger = scale_cpu_time(t, s, th, th, cores_ratio=1 / k)
    assert same == pytest.approx(t)
    assert same - larger == pytest.approx(t * s * (1 - 1 / k), rel=1e-9)


def test_a_composed_tp_load_says_what_it_misses():
    """Where the CPU changes the measured loop is dropped; planning TP > 1 on the composition gets the
    note with the two-GPU box's figure, TP 1 does not."""
    src = load_shipped(SRC)
    two = derive_profile(src, Change(n_gpus=2, cpu=CpuTarget(cores=32)))
    one = derive_profile(src, Change(cpu=CpuTarget(cores=32)))
    assert any("TP 2 layerwise load composed" in n for n in two.assumptions)
    assert not any("layerwise load composed" in n for n in one.assumptions)


def test_a_build_s_shape_sets_move_with_its_isa_class_only():
    """`kt_build`: a probe's expert-shape sets are a ratio of one build's costs at two shapes; a larger
    host of the same ISA class runs that build (kept, labelled measured), one of another class runs
    another build (dropped, so the target's curves are read by the constants or by flops alone)."""
    from kttune.hw.derive import Change, CpuTarget, derive_profile

    shipped = load_shipped(SRC)
    sets = [
        Curve(
            "cpu_moe_shape",
            "tokens",
            (Point(1024, 10.0 * h / 1024), Point(2048, 19.0 * h / 1024)),
            dict(method="BF16", threads=11, hidden=h, inter=i, experts=16, top_k=4, kernel="AMXBF16_MOE"),
            backend="kt-kernel:amx",
        )
        for h, i in ((1024, 512), (2048, 512), (4096, 2048))
    ]
    prof = _replace(shipped, curves=shipped.curves + tuple(sets))
    same = derive_profile(prof, Change(cpu=CpuTarget(cores=32))).profile.curves_of("cpu_moe_shape")
    assert [c.points for c in same] == [c.points for c in sets]
    assert all(c.params["label"] == "measured" for c in same)
    for isa in (("avx2", "fma"), ("avx2", "avx512f", "avx512bw", "avx512_bf16")):
        assert not derive_profile(prof, Change(cpu=CpuTarget(cores=32, isa=isa))).profile.has("cpu_moe_shape")
    assert derive_profile(prof, Change(gpu="rtx4090")).profile.has("cpu_moe_shape")  # the CPU unchanged
