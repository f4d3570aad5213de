"""The expert-shape law (kttune.spec.kt_classes.MATRIX_OUTPUT_FLOPS, kttune.hw.features.matrix_work_per_flop):
a kt-kernel MoE call costs its flops plus a cost per output element, so a narrow expert runs fewer
flops per second than a wide one. Held to measurements the law's constants were not taken from: the
probes of three BF16 models on one H200-box instance (2026-12-04) and of two on another (2026-12-03),
each model's CPU MoE predicted from the other models' curves of its instance; the constants come from
`benchmarks/bench_cpu_moe_shapes.py --interleaved` runs (other layers: 16 experts, top-4)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import kttune.spec.kt_classes as kt_classes
from kttune.cost.components import Components
from kttune.hw.derive import Change, CpuTarget, derive_profile
from kttune.hw.features import matrix_work_per_flop
from kttune.hw.profile import load_profile
from kttune.hw.registry import load_shipped
from kttune.spec.kt_classes import matrix_output_flops
from kttune.spec.loader import load_model

DATA = Path(__file__).parents[1] / "data" / "probes-one-instance"
AVX512 = ("avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "fma")
AVX2 = ("avx2", "fma")
INSTANCES = {
    "2026-12-04": ["qwen3-30b-a3b-bf16-instance", "glm-4.5-air-bf16-instance", "mixtral-8x7b-bf16-instance"],
    "2026-12-03": ["qwen3-30b-a3b-one-instance", "glm-4.5-air-one-instance"],
}


def test_work_per_flop_is_one_without_a_cost_per_element_and_grows_as_the_expert_narrows():
    assert matrix_work_per_flop(2048, 768, 0.0) == 1.0
    # 2048 x 768: 6HI = 9,437,184 flops and 2I + H = 3,584 elements per routed pair
    assert matrix_work_per_flop(2048, 768, 1000.0) == pytest.approx(1 + 1000 * 3584 / 9437184)
    widths = [(2048, 512), (2048, 768), (4096, 1408), (7168, 2048), (4096, 14336)]
    works = [matrix_work_per_flop(h, i, 2795.0) for h, i in widths]
    assert works == sorted(works, reverse=True)


def test_the_constant_is_the_measuring_build_and_class_s():
    assert matrix_output_flops("kt-kernel:amx", "AMXBF16_MOE") > 1000
    # the same class in the AVX-512 build: the MACs are slow, the elements hardly show
    assert matrix_output_flops("kt-kernel:avx512_bf16", "AMXBF16_MOE") < 0.1 * matrix_output_flops(
        "kt-kernel:amx", "AMXBF16_MOE"
    )
    assert matrix_output_flops("kt-kernel:amx", "no-such-class") == 0.0
    assert matrix_output_flops("torch-cpu", "AMXBF16_MOE") == 0.0
    assert matrix_output_flops(None, None) == 0.0


@pytest.mark.parametrize("isa", [AVX2, AVX512])
def test_a_curve_derived_to_another_isa_class_keeps_no_cost_per_element(isa):
    """The measured build's constant is not the target build's: a CPU MoE curve `profile derive`
    carried from the AMX box to an AVX-512 or AVX2 host is read by flops alone; one carried to a larger
    AMX host keeps the AMX build's."""
    shipped = load_shipped("h200-pcie5-xeon-amx-16c")
    for target, kept in ((CpuTarget(cores=32, isa=isa), False), (CpuTarget(cores=32), True)):
        derived = derive_profile(shipped, Change(cpu=target)).profile
        curves = derived.curves_of("cpu_moe", method="BF16")
        assert curves
        assert all((matrix_output_flops(c.backend, c.params.get("kernel")) > 0) == kept for c in curves)


def held_out_errors(instance: str) -> dict[str, float]:
    """Each probe's CPU MoE at 512 tokens and more (kt-kernel's matrix kernel), predicted from the other
    probes of its instance: mean signed error per model."""
    probes = {n: load_profile(DATA / f"probe-{n}.profile.json") for n in INSTANCES[instance]}
    out = {}
    for name, probe in probes.items():
        others = replace(probe, curves=tuple(c for n, p in probes.items() if n != name for c in p.curves))
        model = load_model(name.split("-bf16")[0].split("-one-instance")[0], "BF16")
        comp = Components(others, model, "BF16")
        curve = next(c for c in probe.curves_of("cpu_moe", method="BF16"))
        th = int(curve.params["threads"])
        errs = [comp.cpu_moe_ms(p.x, model.num_experts, th) / p.t_ms - 1 for p in curve.points if p.x >= 512]
        out[model.name] = sum(errs) / len(errs)
    return out


@pytest.mark.parametrize("instance", sorted(INSTANCES))
def test_a_model_s_cpu_experts_from_other_shapes_of_its_instance(instance, monkeypatch):
    with_law = held_out_errors(instance)
    monkeypatch.setattr(kt_classes, "MATRIX_OUTPUT_FLOPS", {})
    flops_only = held_out_errors(instance)
    worst_law = max(abs(e) for e in with_law.values())
    worst_flops = max(abs(e) for e in flops_only.values())
    assert worst_law <= 0.15, with_law
    assert worst_flops > 0.15 and worst_law < 0.6 * worst_flops, (with_law, flops_only)
