"""The path-runner adapter of the measured search (kttune/app/runner_evaluator.py) on the runner's CPU
variant: one session for every configuration, a fresh timed sample per call, the lengths it cannot
measure left out with their reason."""

from __future__ import annotations

import importlib.util

import pytest

from kttune import app
from kttune.config import LaunchConfig
from kttune.errors import UserError
from kttune.units import GIB
from kttune.app.runner_evaluator import cpu_variant_threads, hybrid_max_tokens, path_runner_evaluator

HAVE_RUNNER = importlib.util.find_spec("kttune.runner") is not None


@pytest.mark.skipif(HAVE_RUNNER, reason="the path runner is installed")
def test_without_the_runner_the_error_names_the_fallback():
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, profile="h200-pcie5-xeon-amx-16c")
    with pytest.raises(UserError, match="--evaluator model"):
        path_runner_evaluator(inp, "cpu")


def cfg(n=0, chunk=128, thr=128, threads=1) -> LaunchConfig:
    return LaunchConfig(
        method="BF16",
        tp=1,
        num_gpu_experts=n,
        chunked_prefill_size=chunk,
        gpu_prefill_token_threshold=thr,
        max_total_tokens=4096,
        cpuinfer_threads=threads,
    )


@pytest.mark.skipif(not HAVE_RUNNER, reason="needs the path runner (kttune.runner)")
def test_cpu_runner_samples_every_call_on_one_session(tmp_path):
    wl = tmp_path / "wl.json"
    wl.write_text('{"prompt_tokens": [64, 200], "output_tokens": 16, "concurrency": 1}')
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, profile="h200-pcie5-xeon-amx-16c", workload=str(wl))
    ev = path_runner_evaluator(inp, "cpu", threads=(11, 13), chunks=(128, 256), isolate=False)
    try:
        assert ev.spec.threads == (1,) and ev.thread_map == {11: 1, 13: 1}  # capped on a small machine
        assert ev.spec.max_tokens == 200  # no forward is longer than the longest prompt
        a = ev.measure(cfg(threads=11), [64, 200])
        b = ev.measure(cfg(threads=11), [64])
        assert set(a) == {64, 200} and set(b) == {64} and a[64] > 0 and b[64] > 0
        assert ev.samples == 3  # a fresh sample per call
        session = ev.session
        ev.measure(cfg(n=4, chunk=256, thr=0, threads=13), [200])  # another configuration, same layers
        assert ev.session is session and session.stats["timed_runs"] == 4
        assert ev.measure(cfg(chunk=1024, thr=0), [200]) == {
            200: pytest.approx(ev.measure(cfg(chunk=200, thr=0), [200])[200], rel=10)
        }
    finally:
        ev.close()


def test_hybrid_cap_follows_the_host_ram():
    from kttune.spec.loader import load_model

    m = load_model("kimi-k2-thinking", "RAWINT4")
    c = LaunchConfig("RAWINT4", 1, 0, 4096, 0, 65536, 13)
    chunks = (2048, 4096, 8192, 16384, 32768, 65536)
    big, small = hybrid_max_tokens(m, c, chunks, 2048 * 2**30), hybrid_max_tokens(m, c, chunks, 64 * 2**30)
    assert small < big and small in chunks and big == 65536
    assert cpu_variant_threads([1, 64])[1] == 1
