"""One machine, one answer: every kt-kernel probe of one `kttune probe` run (CPU MoE, stage A, the
layerwise pipeline) measures the same thread counts, quick or full, since one `--kt-cpuinfer` drives
both prefill paths; and a quick probe measures at least two of them (its search picks between them)."""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.hw.profile import CpuInfo, Inventory, NumaNode
from kttune.probes import gpu_suite
from kttune.probes.common import NullReporter, kt_thread_counts, probe_thread_counts
from kttune.probes.inventory import collect_cpu
from kttune.probes.run import ProbeOptions, plan_probe

CORES = st.integers(min_value=2, max_value=128)


@given(cores=CORES)
def test_quick_counts_are_two_below_the_cliff_and_among_the_full_ones(cores):
    quick, full = kt_thread_counts(cores, True), kt_thread_counts(cores, False)
    assert len(quick) == 2 and len(set(quick)) == 2
    assert set(quick) <= set(full)
    assert all(1 <= t <= cores for t in full)
    if cores > 4:  # the cliff: a pool that fills every core starves the driving thread
        assert max(quick) == cores - 3 and max(full) == cores - 1
        assert min(quick) == max(1, cores - 5)


def test_counts_on_the_gpu_box_and_the_vm():
    assert kt_thread_counts(16, True) == [11, 13]  # the full profile's pick, 11, is measured quick too
    assert kt_thread_counts(16, False) == [11, 13, 15]
    assert kt_thread_counts(2, True) == kt_thread_counts(2, False) == [1, 2]
    assert kt_thread_counts(5, True) == [1, 2] and kt_thread_counts(5, False) == [1, 2, 4]
    assert probe_thread_counts(16, True, (7, 3, 7)) == [3, 7]  # --threads overrides, deduplicated


def _inventory(cores: int) -> Inventory:
    node = NumaNode(id=0, cpus=tuple(range(cores)))
    return Inventory(cpu=CpuInfo(model="test", physical_cores=cores, logical_cpus=cores, numa_nodes=(node,)))


def _pipeline_threads(steps) -> set[int]:
    pipes = [f for name, f in steps if name.startswith("pipeline")]
    assert pipes, "the GPU suite plans a pipeline step per representative shape"
    sets = {f.threads for f in pipes}
    assert len(sets) == 1  # every shape at the same counts
    return set(sets.pop())


@pytest.fixture(scope="module")
def cpu():
    return collect_cpu()


@pytest.mark.kt
@settings(max_examples=25, deadline=None)
@given(cores=CORES, quick=st.booleans())
def test_cpu_moe_stage_a_and_pipeline_plans_measure_the_same_threads(cpu, cores, quick):
    plan = plan_probe(ProbeOptions(quick=quick), cpu, cores, [0])
    moe = {t.threads for t in plan["cpu_moe"].tasks}
    stage_a = {t.threads for t in plan["stage_a"].tasks}
    if not stage_a:
        pytest.skip("kt-kernel has no stage A writer here")
    # as run_probe passes them, and as the GPU suite counts them on its own from the inventory
    passed = _pipeline_threads(gpu_suite.plan_gpu_probes(None, None, quick, NullReporter(), threads=plan.threads))
    with pytest.MonkeyPatch.context() as mp:  # this process may run on `cores` CPUs
        mp.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
        own = _pipeline_threads(gpu_suite.plan_gpu_probes(_inventory(cores), None, quick, NullReporter()))
    assert moe == stage_a == passed == own == set(kt_thread_counts(cores, quick))


@pytest.mark.kt
def test_threads_option_drives_all_three(cpu):
    plan = plan_probe(ProbeOptions(quick=True, threads=(2, 1)), cpu, 16, [0])
    assert {t.threads for t in plan["cpu_moe"].tasks} == {t.threads for t in plan["stage_a"].tasks} == {1, 2}
    steps = gpu_suite.plan_gpu_probes(None, None, True, NullReporter(), threads=plan.threads)
    assert _pipeline_threads(steps) == {1, 2}
