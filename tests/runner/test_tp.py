"""TP 2 over gloo (two CPU processes) computes what TP 1 computes: sharded attention heads, shared
and GPU experts by I/tp, CPU experts on rank 0, all-reduces, the layerwise per-expert barrier.

The hidden states after K layers are mostly the residual stream: a rank whose share of the routed
experts were zero would move them by under 0.1% here. So the routed-expert output of one layer is
compared too, on each path, where a missing share is half the answer."""

from dataclasses import replace
from typing import Any

import torch
from kttune.probes.ranks import rank_process_group, run_ranks
from kttune.runner.path_runner import Dist, PathRunner
from kttune.runner.stack import StackOptions, build_stack, small_spec
from kttune.runner.api import crossover_interval
from kttune.runner.tp import TpJob, run_tp, sweep_tp
from kttune.spec.loader import load_model

MODEL = ("kimi-k2-thinking", "RAWINT4")  # MLA, shared experts, router bias, int4 re-sent
OPTS = StackOptions(layers=2, gpu_experts=4, cpuinfer=1, max_tokens=128, device="cpu")

PROMPTS = ((100, 64, 64, None), (64, 64, 64, "layerwise"))  # a layerwise chunk then a hybrid tail; layerwise alone


def _tp1(name, method, opts):
    spec = load_model(name, method)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        st = build_stack(small_spec(spec), spec.router, method, opts)
        r = PathRunner(st)
        out = []
        for p, c, t, f in PROMPTS:
            run = r.run_prompt(p, c, t, f)
            out.append((run, r.last_hidden.float()))
        st.close()
        return out
    finally:
        torch.set_num_threads(before)


def test_tp2_over_gloo_equals_tp1():
    for name, method in (MODEL,):
        opts = OPTS
        one = _tp1(name, method, opts)
        two = run_tp(TpJob(name, method, 2, opts, PROMPTS, small=True, backend="gloo"), timeout_s=300)
        for (run1, h1), (run2, h2) in zip(one, two):
            assert run2["tp"] == 2 and [f["path"] for f in run2["forwards"]] == list(run1.paths)
            h2 = torch.from_numpy(h2)
            rel = ((h2 - h1).abs().mean() / h1.abs().mean()).item()
            assert rel < 0.03, (name, rel)


def _routed(runner: PathRunner, hidden: int) -> dict:
    h = (torch.randn(64, hidden, generator=torch.Generator().manual_seed(7)) * 0.5).to(torch.bfloat16)
    return {p: runner.moe_output(h, p)[0].float() for p in ("hybrid", "layerwise")}


def _routed_worker(rank: int, port: int, queue: Any) -> None:
    torch.set_num_threads(1)
    with rank_process_group(rank, 2, "gloo", port, queue, reraise=True):
        spec = small_spec(load_model(*MODEL))
        st = build_stack(spec, spec.router, MODEL[1], replace(OPTS, tp=2, rank=rank))
        runner = PathRunner(st, dist=Dist(rank, 2))
        out = {p: y.numpy() for p, y in _routed(runner, spec.hidden_size).items()}
        runner.close()
        st.close()
        if rank == 0:
            queue.put(("ok", out))


def test_tp2_routed_output_equals_tp1_on_each_path():
    spec = small_spec(load_model(*MODEL))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        st = build_stack(spec, spec.router, MODEL[1], OPTS)
        one = _routed(PathRunner(st), spec.hidden_size)
        st.close()
    finally:
        torch.set_num_threads(before)
    two = run_ranks(_routed_worker, 2, (), timeout_s=300)
    for path, y1 in one.items():
        y2 = torch.from_numpy(two[path])
        rel = ((y2 - y1).abs().mean() / y1.abs().mean()).item()
        assert rel < 0.03, (path, rel)


def test_tp_sweep_measures_every_size_on_each_path_in_rounds():
    """`sweep_tp` (benchmarks/bench_tp_paths.py's measurement): each (size, path) warmed once, then
    timed once per round; its record carries the rounds' estimate, and the crossover interval reads
    the records as it reads `kttune paths`'s."""
    runs = sweep_tp(TpJob(*MODEL, 2, OPTS, (), small=True, backend="gloo"), (32, 64), rounds=3, timeout_s=300)
    assert sorted((r.prompt_tokens, r.forced_path) for r in runs) == [
        (32, "hybrid"),
        (32, "layerwise"),
        (64, "hybrid"),
        (64, "layerwise"),
    ]
    for r in runs:
        assert r.tp == 2 and r.paths == (r.forced_path,)
        est = r.timing["measured_ms"]
        assert len(est["samples"]) == 3 and sorted(est["rounds"]) == [0, 1, 2]
        assert est["low"] <= est["median"] <= est["high"]
    crossover_interval(runs)  # reads them (a crossing or none on the small shapes)
