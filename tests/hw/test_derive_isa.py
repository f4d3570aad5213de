"""CPU derivation across ISA classes: kt-kernel's AVX-512 build measured against the profile derived
from the AMX box. BF16's rate comes from one point (qwen3-30b-a3b's expert shape, 1,024 tokens, 13
workers, on the AMX box's own CPU); FP8's and RAWINT4's are 1 (their kernels use no AMX tiles).
Held out: the other points of that shape (forwards bound by memory and synchronisation, which an
ISA does not move), every point of the probe's small shape at 11 workers there, and every point of
another CPU (a quiet Xeon with AVX-512 and no AMX, 1 worker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from kttune.hw.derive import (
    CPU_SCALED_ERROR,
    CPU_VENDOR_ERROR,
    CPU_VENDORS,
    ISA_RATE,
    ISA_RATE_MEASURED,
    Change,
    CpuTarget,
    derive_profile,
    scale_cpu_time,
)
from kttune.hw.registry import load_shipped

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
SHAPE = dict(hidden=1024, inter=512, experts=32, top_k=8)
AVX512 = ("avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "fma")
RATE_POINT = ("BF16", 1024)
# What the measured AVX-512 rates held to on the other CPU (docs/derive.md): tighter than the label
# of every scaled CPU curve, which also covers a change of box at real expert shapes.
ISA_HELD = 1.5  # the point of the qwen3-shape run BF16's rate was read at


def _checks(
    results: str, cores: int, held_out=lambda method, tokens: True, build="avx512_bf16", isa=AVX512, vendor=None
):
    """(method, tokens, predicted / measured p10, label) of `build`'s points in `results`."""
    doc = json.loads((RESULTS / results).read_text())
    target = CpuTarget(cores=cores, isa=isa, vendor=vendor)
    derived = derive_profile(load_shipped("h200-pcie5-xeon-amx-16c"), Change(cpu=target))
    out = []
    for row in doc["rows"]:
        if row["build"] != build or not held_out(row["method"], row["tokens"]):
            continue
        (curve,) = derived.profile.curves_of("cpu_moe", method=row["method"], threads=doc["threads"], **doc["shape"])
        pred = {int(p.x): p.t_ms for p in curve.points}
        out.append((row["method"], row["tokens"], pred[row["tokens"]] / row["p10_ms"], curve.params["label"]))
    return out


def test_the_measured_avx512_rates_hold_on_another_cpu():
    checks = _checks("2026-12-02-xeon-avx512-2c/cpu-isa.json", cores=2)
    assert {m for m, *_ in checks} == {"BF16", "FP8", "RAWINT4"} and len(checks) == 9
    for method, tokens, ratio, label in checks:
        assert label == "scaled", (method, tokens)
        assert 1 / ISA_HELD <= ratio <= ISA_HELD <= CPU_SCALED_ERROR, (method, tokens, ratio)


@pytest.mark.parametrize(
    "results, points",
    [("cpu-isa-amx-box-11t.json", 12), ("cpu-isa-amx-box-qwen3-shape-13t.json", 8)],
)
def test_on_the_amx_cpu_an_isa_change_moves_only_the_compute(results, points):
    checks = _checks(
        f"2026-12-03-h200-pcie5-xeon-amx-16c/{results}", cores=16, held_out=lambda m, t: (m, t) != RATE_POINT
    )
    assert len(checks) == points
    for method, tokens, ratio, _ in checks:
        # before the compute split (whole calls at datasheet rates) the small shape's points were
        # 1.21-2.87x, BF16 at 4-16 tokens the worst
        assert 0.8 <= ratio <= 1.25, (method, tokens, ratio)


AVX2 = ("avx2", "fma")


def test_avx2_rates_read_on_the_amx_cpu_hold_where_they_were_not_read():
    """AVX2's rates come from the qwen3-shape run's 1,024-token points (the AVX2 build on the AMX
    box); every other point of both shapes there, and the quiet Xeon's AVX2 build (another CPU, one
    worker), are held out. Small forwards are where they miss (the AVX2 build's per-call work beyond
    its flops), so their `datasheet` label, not `scaled`."""
    box = "2026-12-03-h200-pcie5-xeon-amx-16c"
    rate_point = lambda m, t: t != 1024  # noqa: E731
    checks = _checks(f"{box}/cpu-isa-amx-box-avx2-qwen3-shape-13t.json", 16, rate_point, "avx2", AVX2)
    checks += _checks(f"{box}/cpu-isa-amx-box-avx2-11t.json", 16, build="avx2", isa=AVX2)
    checks += _checks("2026-12-02-xeon-avx512-2c/cpu-isa.json", 2, build="avx2", isa=AVX2)
    assert len(checks) == 6 + 12 + 9
    for method, tokens, ratio, label in checks:
        assert label == "datasheet"
        assert 0.55 <= ratio <= 1.5, (method, tokens, ratio)  # well inside the label's 3x
        if tokens >= 64:
            assert 0.75 <= ratio <= 1.5, (method, tokens, ratio)


def test_measured_rates_are_labelled_and_the_rest_stay_datasheet():
    assert all(m in ISA_RATE[cls] for cls, m in ISA_RATE_MEASURED)
    derived = derive_profile(
        load_shipped("h200-pcie5-xeon-amx-16c"), Change(cpu=CpuTarget(cores=16, isa=("avx2", "fma")))
    ).profile
    # below the full pool (kept as measured whatever the ISA: the driving thread's starvation)
    assert {c.params["label"] for c in derived.curves_of("cpu_moe") if c.params["threads"] < 16} == {"datasheet"}


@given(
    # no subnormals: kt-kernel, loaded by other tests, sets flush-to-zero in this process
    t=st.floats(0.1, 1e3, allow_subnormal=False),
    serial=st.floats(0, 0.8, allow_subnormal=False),
    threads=st.integers(1, 64),
    rate=st.floats(0.05, 1.0, allow_subnormal=False),
    compute_share=st.floats(0, 1, allow_subnormal=False),
)
def test_a_slower_isa_costs_between_nothing_and_all_of_the_call(t, serial, threads, rate, compute_share):
    """Laws of the compute split: at the same rate nothing moves whatever the compute share; at a
    slower rate the call takes at least its time at the measured rate and at most all of its parallel
    share at the slower one; all compute gives the whole-call scaling."""
    fixed = 0.05 * t
    compute = compute_share * (t - fixed)
    same = scale_cpu_time(t, serial, threads, threads, 1.0, fixed_ms=fixed, compute_ms=compute)
    assert same == pytest.approx(scale_cpu_time(t, serial, threads, threads, 1.0, fixed_ms=fixed))
    slow = scale_cpu_time(t, serial, threads, threads, rate, fixed_ms=fixed, compute_ms=compute)
    whole = scale_cpu_time(t, serial, threads, threads, rate, fixed_ms=fixed)
    assert same * (1 - 1e-9) <= slow <= whole * (1 + 1e-9)
    all_compute = scale_cpu_time(t, serial, threads, threads, rate, fixed_ms=fixed, compute_ms=t - fixed)
    assert all_compute == pytest.approx(whole)


@pytest.mark.parametrize("isa, switch", [(AVX512, 192), (AVX2, None)])
def test_a_derived_host_runs_the_class_its_build_has(isa, switch):
    """kt-kernel's AVX-512 build runs the AMX-family classes, with their switch of GEMM kernels at
    4E/k tokens; its AVX2 build runs one GEMM at every length (docs/cost-model.md#kt-kernels-two-gemm-kernels):
    a profile derived for the host says which, and the cost model puts the switch only where it is."""
    from kttune.cost.components import Components
    from kttune.spec.loader import load_model

    derived = derive_profile(load_shipped("h200-pcie5-xeon-amx-16c"), Change(cpu=CpuTarget(cores=32, isa=isa))).profile
    kernels = {c.params["kernel"] for c in derived.curves_of("cpu_moe", method="RAWINT4")}
    assert kernels == ({"AMXInt4_KGroup_MOE"} if switch else {"AVX2RawInt4_MOE"})
    comp = Components(derived, load_model("kimi-k2-thinking"), "RAWINT4")
    assert comp.cpu_matmul_above() == switch


@pytest.mark.parametrize("build, isa", [("avx512_bf16", AVX512), ("avx2", ("avx2", "fma"))])
def test_a_cpu_of_another_vendor_is_labelled_with_the_error_it_showed(build, isa):
    """A quiet AMD EPYC (Zen 4) core, one worker, kt-kernel's AVX-512 and AVX2 builds: derived from the
    Intel AMX box with the target's vendor named, every curve is a datasheet guess whose stated error
    holds every point; named as the measured box's vendor, the AVX-512 build's points fall outside
    the 2x a `scaled` curve states (the per-core speed is the microarchitecture's, not the ISA's)."""
    results = "2026-12-05-epyc-avx512-2c/cpu-isa-quiet.json"
    named = _checks(results, cores=2, build=build, isa=isa, vendor=CPU_VENDORS["amd"])
    assert len(named) == 9
    for method, tokens, ratio, label in named:
        assert label == "datasheet" and 1 / CPU_VENDOR_ERROR <= ratio <= CPU_VENDOR_ERROR, (method, tokens, ratio)
    if build == "avx512_bf16":
        same = _checks(results, cores=2, build=build, isa=isa)
        outside = [(m, t) for m, t, r, label in same if label == "scaled" and r > CPU_SCALED_ERROR]
        assert ("BF16", 256) in outside and ("FP8", 64) in outside


def test_an_avx2_only_cpu_of_another_vendor_holds_to_the_stated_errors():
    """Held out of both errors: an AMD EPYC Zen 3 core (family 25 model 1, AVX2 and no AVX-512, the
    development VM of 2026-12-07, quiet), one worker, kt-kernel's AVX2 build, measured after
    `CPU_VENDOR_ERROR` was set from the Zen 4 core. Derived with its vendor named every point is a
    datasheet guess within that error; derived as an Intel AVX2 host, within the ISA class's own
    (`CPU_ISA_ERROR`) too: BF16 derived slow, FP8 fast (docs/derive.md#across-cpu-vendors)."""
    from kttune.hw.derive import CPU_ISA_ERROR

    results = "2026-12-07-epyc-avx2-2c/cpu-isa-quiet.json"
    for vendor, err in ((CPU_VENDORS["amd"], CPU_VENDOR_ERROR), (None, CPU_ISA_ERROR)):
        checks = _checks(results, cores=2, build="avx2", isa=("avx2", "fma"), vendor=vendor)
        assert {m for m, *_ in checks} == {"BF16", "FP8", "RAWINT4"} and len(checks) == 9
        for method, tokens, ratio, label in checks:
            assert label == "datasheet" and 1 / err <= ratio <= err, (vendor, method, tokens, ratio)
        by_method = {m: r for m, t, r, _ in checks if t == 64}
        assert by_method["BF16"] > 1 > by_method["FP8"]
