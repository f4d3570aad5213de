"""`measure_jobs` on a real runner session (the CPU variant): each round draws its own prompt, the
same for every job of the round, so the rounds sample the router's choice (at a few tokens one draw
moves a large share of the routed pairs on or off the GPU experts: docs/path-runner.md) while a
round's jobs stay paired; and that choice does move with the draw on the runner's router."""

from __future__ import annotations

import torch

from kttune.protocol import Protocol, prompt_seed
from kttune.runner.api import RunnerJob, measure_jobs
from kttune.runner.session import RunnerConfig, RunnerSession, SessionSpec
from tests.helpers import script


def test_each_round_draws_its_own_prompt_shared_by_the_rounds_jobs():
    spec = SessionSpec(
        model="qwen3-30b-a3b", method="BF16", threads=(1,), max_tokens=64, cpu_max_tokens=64, small=True, device="cpu"
    )
    session = RunnerSession(spec)
    seeds: list[tuple[str | None, int]] = []  # (force, seed) of every timed run
    sample = session.sample

    def spy(cfg, prompt, force=None, seed=0):
        seeds.append((force, seed))
        return sample(cfg, prompt, force, seed=seed)

    session.sample = spy
    try:
        cfg = RunnerConfig(4, 16, 16, 1)
        jobs = [RunnerJob(cfg, 16, "hybrid"), RunnerJob(cfg, 16, "layerwise")]
        done, skipped, rounds = measure_jobs(session, jobs, Protocol(repeats=3, seed=5), lambda _: None, seed=5)
    finally:
        session.close()
    assert not skipped and set(done) == set(jobs)
    assert len(seeds) == rounds["timed_samples"]
    for force in ("hybrid", "layerwise"):  # one draw per round, 5 + r, the same for both jobs
        assert sorted({s for f, s in seeds if f == force}) == [prompt_seed(5, r) for r in range(3)]


def test_the_routers_gpu_share_moves_with_the_prompt_draw():
    """The premise: on the runner's router (gpt-oss-20b's, its gate seeded as the stack seeds it), the
    share of 8 tokens' routed pairs that land on the first 8 of 32 experts (the GPU-resident ones)
    differs from draw to draw by several points, and averages the experts' share, 1/4."""
    from kttune.spec.loader import load_model

    draws = script("benchmarks/diag/diag_routing_draw.py")  # where the draws are measured
    t = torch.tensor(draws.shares(load_model("gpt-oss-20b", "MXFP4"), 8, 8, 64, 0))
    assert abs(t.mean().item() - 0.25) < 0.04
    assert t.std().item() > 0.04 and t.max().item() - t.min().item() > 0.15
