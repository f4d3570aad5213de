"""tune's report says what its profile step did, read from tune runs on the H200 box."""

from __future__ import annotations

import json
from pathlib import Path

from kttune.emit.tune_report import markdown, profile_line, summary_lines

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "2026-12-03-h200-pcie5-xeon-amx-16c"


def _tune_doc(name: str) -> dict:
    """The tune result bench_tune kept of that run (its verification, gains and probe step)."""
    (m,) = json.loads((RESULTS / name).read_text())["models"]
    return m["tune"]


def test_the_attention_block_tune_timed_is_in_the_summary():
    probe = _tune_doc("tune-qwen3-fp8-sglang-loop.json")["probe"]
    line = profile_line(probe)
    assert line.startswith("profile: reused (measured on this machine kind")
    assert "attention block of qwen3-30b-a3b-fp8 timed on this GPU in 1.0 s, into this run's copy" in line


def test_a_reused_profile_without_a_block_says_only_that_and_nothing_says_nothing():
    probe = _tune_doc("tune-qwen3-rival.json")["probe"]
    assert profile_line(probe) == f"profile: reused ({probe['why']})" and "attention block" not in profile_line(probe)
    assert profile_line({}) == ""
    assert profile_line({"action": "given", "profile": "x.json"}) == "profile: x.json (given; nothing probed)"
    probed = {"action": "probed", "why": "no FP8 curves", "threads": [11, 13], "curves": 40, "seconds": 35.2}
    assert profile_line(probed) == "profile: probed here (no FP8 curves): 40 curves at 11, 13 threads in 35 s"


def test_the_summary_and_markdown_carry_the_line():
    doc = {
        "mode": "measured",
        "model": "m",
        "method": "BF16",
        "evaluator": "runner",
        "profile": "p",
        "pick": {
            "chunked_prefill_size": 8192,
            "gpu_prefill_token_threshold": 1024,
            "num_gpu_experts": 8,
            "cpuinfer_threads": 13,
        },
        "decision": "d",
        "command": ["python", "-m", "sglang.launch_server"],
        "probe": _tune_doc("tune-qwen3-fp8-sglang-loop.json")["probe"],
    }
    assert any(x.startswith("profile: reused") for x in summary_lines(doc))
    assert "- profile: reused" in markdown(doc)
