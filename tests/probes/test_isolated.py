"""A probe step in a spawned child (kttune.probes.isolated): its result, progress and errors come back
to the caller, an interrupt in the caller ends it, and what kt-kernel cannot free leaves with it."""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal

import psutil
import pytest

from kttune.errors import UserError
from kttune.probes.common import NullReporter
from kttune.probes.isolated import packed, run_isolated


def _steps(n: int, *, reporter) -> list[int]:
    reporter.plan(n, "counting")
    for i in range(n):
        reporter.step(f"step {i}", 0.5)
        reporter.note(f"note {i}")
    return [os.getpid()] * n


def _fails(kind: str, *, reporter) -> None:
    reporter.note("about to fail")
    if kind == "user":
        raise UserError("the thing is wrong", "pass another thing")
    if kind == "value":
        raise ValueError("a bad value")
    if kind == "exit":
        os._exit(3)
    if kind == "killed":  # as the kernel's out-of-memory killer ends a process
        os.kill(os.getpid(), signal.SIGKILL)
    raise KeyError("lost")


class Recorder(NullReporter):
    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self.stop_at = stop_at

    def plan(self, total_steps: int, title: str) -> None:
        self.calls.append(("plan", total_steps, title))

    def step(self, description: str, advance: float = 1.0) -> None:
        self.calls.append(("step", description, advance))
        if self.stop_at is not None and len(self.calls) >= self.stop_at:
            raise KeyboardInterrupt

    def note(self, message: str) -> None:
        super().note(message)
        self.calls.append(("note", message))


def test_the_result_and_the_progress_come_back_in_order_from_another_process():
    rep = Recorder()
    pids = run_isolated(_steps, 2, reporter=rep)
    assert len(pids) == 2 and pids[0] != os.getpid()
    assert rep.calls == [
        ("plan", 2, "counting"),
        ("step", "step 0", 0.5),
        ("note", "note 0"),
        ("step", "step 1", 0.5),
        ("note", "note 1"),
    ]


@pytest.mark.parametrize(
    "kind, error, words",
    [
        ("user", UserError, "the thing is wrong; pass another thing"),
        ("value", ValueError, "a bad value"),
        ("other", RuntimeError, "_fails: KeyError"),
        ("exit", RuntimeError, "exit code 3"),
        ("killed", RuntimeError, "killed by signal 9 \\(the system may have run out of memory\\)"),
    ],
)
def test_an_error_in_the_child_comes_back_as_its_kind(kind, error, words):
    rep = Recorder()
    with pytest.raises(error, match=words):
        run_isolated(_fails, kind, reporter=rep)
    assert rep.notes == ["about to fail"]
    assert not multiprocessing.active_children()


def test_an_interrupt_in_the_caller_ends_the_child():
    with pytest.raises(KeyboardInterrupt):
        run_isolated(_steps, 10_000, reporter=Recorder(stop_at=2))
    assert not multiprocessing.active_children()


@pytest.mark.kt
def test_stage_a_layers_leave_with_the_child():
    """One method's stage A writes (kt-kernel keeps every writer layer it built, each cycling over a
    multiple of the last-level cache) leave the caller's resident size where it was."""
    from kttune.probes.inventory import collect_cpu
    from kttune.probes.run import ProbeOptions, stage_a_options
    from kttune.probes.stage_a import StageAPlan, StageATask, probe_stage_a

    cpu = collect_cpu()
    opts = stage_a_options(ProbeOptions(quick=True), cpu.last_level_cache_bytes)
    plan = StageAPlan([StageATask(method="BF16", threads=1, threadpools=1, inters=(256,))])
    gc.collect()
    before = psutil.Process().memory_info().rss
    rep = NullReporter()
    curves = run_isolated(probe_stage_a, opts, cpu, reporter=rep, cores=1, numa_ids=[0], quick=True, plan=plan)
    if not curves or not curves[0].points:
        pytest.skip(f"no stage A write here: {rep.notes}")
    (pt,) = curves[0].points
    gc.collect()
    grown = psutil.Process().memory_info().rss - before
    assert pt.extra["source_bytes"] > 4 * 2**20
    assert grown < pt.extra["source_bytes"] / 4, f"grew {grown / 2**20:.0f} MiB"


@pytest.mark.parametrize(
    "sizes, bound, groups",
    [
        ([1, 2, 3, 4], 5, [[1, 2], [3], [4]]),
        ([1, 2, 3, 4], 10, [[1, 2, 3, 4]]),
        ([6, 1, 1, 7, 2], 5, [[6], [1, 1], [7], [2]]),  # a part past the bound alone
        ([3, 3, 3], 0, [[3], [3], [3]]),
        ([], 5, []),
    ],
)
def test_parts_are_packed_in_order_up_to_the_bound(sizes, bound, groups):
    assert packed(sizes, lambda n: n, bound) == groups


def test_packing_keeps_every_part_once_in_order_and_no_group_past_the_bound_but_a_lone_part():
    import random

    rng = random.Random(7)
    for _ in range(200):
        parts = [(i, rng.randint(0, 9)) for i in range(rng.randint(0, 12))]
        bound = rng.randint(0, 20)
        out = packed(parts, lambda p: p[1], bound)
        assert [p for g in out for p in g] == parts
        assert all(sum(p[1] for p in g) <= bound or len(g) == 1 for g in out)
        # greedy: a group could not have taken the next group's first part
        assert all(sum(p[1] for p in a) + b[0][1] > bound for a, b in zip(out, out[1:]))
