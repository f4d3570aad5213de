"""The probe registry (kttune.probes.run.PROBES): `run_probe` iterates its records, so a probe is
one record: the curve kinds it writes, whether the options ask for it, what it needs, its plan and
its run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kttune.hw.curve_kinds import CURVE_KINDS
from kttune.hw.profile import Curve, Point
from kttune.probes import run as probe_run
from kttune.probes.inventory import collect_inventory, numa_nodes_with_cpus, usable_cores
from kttune.probes.run import PROBES, Need, Probe, ProbeOptions, Steps, plan_probe, run_probe


def _args():
    cpu = collect_inventory().cpu
    return cpu, usable_cores(cpu), list(numa_nodes_with_cpus(cpu))


def test_every_curve_kind_has_one_probe_writing_it():
    written = [k for p in PROBES for k in p.writes]
    assert sorted(written) == sorted(CURVE_KINDS)  # each kind of the table, once
    assert len({p.kind for p in PROBES}) == len(PROBES)


def test_options_and_needs_decide_what_is_planned():
    cpu, cores, numa = _args()
    plan = plan_probe(ProbeOptions(quick=True, threads=(1,), stage_a=False, gpu=False), cpu, cores, numa)
    assert list(plan.plans) == ["cpu_moe"] and not plan.missing  # the rest are not asked for
    plan = plan_probe(ProbeOptions(quick=True, threads=(1,)), cpu, cores, numa)
    import torch

    if not torch.cuda.is_available():
        # asked for, but this machine has no CUDA: left out, with the need it misses
        assert plan["gpu"] is None and plan.missing["gpu"].name == "CUDA" and plan.missing["allreduce"].name == "CUDA"
    assert plan.steps == sum(p.steps for p in plan.plans.values()) and plan.threads == (1,)


@pytest.mark.kt
def test_a_new_record_runs_where_it_stands(monkeypatch, tmp_path):
    """A record appended to PROBES is planned, counted, run after the ones before it (its plan sees
    theirs) and its curve lands in the profile; a record whose need fails is left out with its note."""
    seen = {}

    def plan(ctx, plans):
        seen["before"] = list(plans)
        return Steps(1)

    def run(ctx, plan):
        ctx.reporter.step("extra", 1)
        return [Curve("gpu_gemm", "tokens", (Point(x=1.0, t_ms=1.0),), {"hidden": 8, "out": 8})]

    never = Need("a warp drive", lambda ctx: False, lambda ctx: "extra2 not run: no warp drive")
    monkeypatch.setattr(
        probe_run,
        "PROBES",
        PROBES + (Probe("extra", ("gpu_gemm",), plan, run), Probe("extra2", ("gpu_gemm",), plan, run, needs=(never,))),
    )
    p = run_probe(
        ProbeOptions(
            quick=True,
            methods=("BF16",),
            threads=(1,),
            max_tokens=2,
            stage_a=False,
            host_ram=False,
            gpu=False,
            write_cache=False,
            merge_cached=False,
            out=tmp_path / "p.json",
        )
    )
    assert seen["before"] == ["cpu_moe"]
    assert [c.kind for c in p.curves] == ["cpu_moe", "gpu_gemm"]
    assert "extra2 not run: no warp drive" in p.provenance.notes


def test_the_attention_block_runs_alone_or_with_the_gpu_probes_where_cuda_is(monkeypatch):
    """One record writes the block: asked for alone (cpu_moe, stage A and the GPU suite off: what
    `kttune tune` runs when its profile lacks the model's block) or with the GPU probes; it needs CUDA."""
    from kttune.runner.stack import small_spec
    from kttune.spec.loader import load_model

    cpu, cores, numa = _args()
    spec = small_spec(load_model("qwen3-30b-a3b"))
    alone = ProbeOptions(quick=True, model=spec, cpu_moe=False, stage_a=False, gpu=False, attention_block=True)
    monkeypatch.setattr(probe_run, "_cuda_available", lambda: False)
    plan = plan_probe(alone, cpu, cores, numa)
    assert not plan.plans and plan.missing["attention_block"].name == "CUDA"
    monkeypatch.setattr(probe_run, "_cuda_available", lambda: True)
    plan = plan_probe(alone, cpu, cores, numa)
    assert list(plan.plans) == ["attention_block"] and plan.steps == 1  # the model's block, one step
    both = plan_probe(replace(alone, gpu=True, attention_block=False), cpu, cores, numa)
    assert "attention_block" in both.plans  # the GPU probes run it too
    generic = plan_probe(replace(alone, model=None), cpu, cores, numa)
    assert generic["attention_block"].steps == 2  # one GQA and one MLA block without a model
