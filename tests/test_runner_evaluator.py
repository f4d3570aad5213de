"""The path-runner adapter of the measured search (kttune/runner_evaluator.py). Runs the runner's CPU
variant where kttune.probes.paths exists; until then, checks the one-line error."""

from __future__ import annotations

import importlib.util

import pytest

from kttune import api
from kttune.config import LaunchConfig
from kttune.errors import UserError
from kttune.runner_evaluator import path_runner_evaluator

HAVE_RUNNER = importlib.util.find_spec("kttune.probes.paths") is not None


@pytest.mark.skipif(HAVE_RUNNER, reason="the path runner is installed")
def test_without_the_runner_the_error_names_the_fallback():
    inp = api.resolve_inputs("qwen3-30b-a3b", "32G", profile="h200-pcie5-xeon-amx-16c")
    with pytest.raises(UserError, match="--evaluator model"):
        path_runner_evaluator(inp, "cpu")


@pytest.mark.skipif(not HAVE_RUNNER, reason="needs the path runner (kttune.probes.paths)")
def test_cpu_runner_measures_every_workload_length_once(tmp_path):
    wl = tmp_path / "wl.json"
    wl.write_text('{"prompt_tokens": [64, 200], "output_tokens": 16, "concurrency": 1}')
    inp = api.resolve_inputs("qwen3-30b-a3b", "32G", profile="h200-pcie5-xeon-amx-16c", workload=str(wl))
    ev = path_runner_evaluator(inp, "cpu")
    cfg = LaunchConfig(method="BF16", tp=1, num_gpu_experts=0, chunked_prefill_size=128, gpu_prefill_token_threshold=128,
                       max_total_tokens=4096, cpuinfer_threads=1)
    first = ev.measure(cfg, [64])
    assert set(first) == {64} and first[64] > 0
    assert set(ev._cache[cfg]) == {64, 200}  # the whole workload in one runner call
    assert ev.measure(cfg, [200]) == {200: ev._cache[cfg][200]}  # answered from it
