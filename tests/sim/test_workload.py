"""Simulated traffic: preset statistics as stated, Poisson arrivals, trace files and their errors."""

from __future__ import annotations

import json

import numpy as np

import pytest
from hypothesis import given, settings, strategies as st

from kttune.errors import UserError
from kttune.search.workload import load_workload
from kttune.sim.workload import load_trace, mix_statistics, poisson_requests, rescale_arrivals

ARXIV, SHAREGPT = load_workload("arxiv-summarize").mix, load_workload("sharegpt-chat").mix


def test_presets_have_the_stated_statistics():
    """The paper's data sets: arXiv mean prompt 9,194 tokens at about 40x the output, ShareGPT 2,340
    at about 6x (docs/simulate.md); the presets stay within 5% / a factor 1.5."""
    s = mix_statistics(ARXIV)
    assert s["prompt_tokens"]["mean"] == pytest.approx(9194, rel=0.05)
    assert 40 / 1.5 <= s["prompt_tokens"]["mean"] / s["output_tokens"]["mean"] <= 40 * 1.5
    c = mix_statistics(SHAREGPT)
    assert c["prompt_tokens"]["mean"] == pytest.approx(2340, rel=0.05)
    assert 6 / 1.5 <= c["prompt_tokens"]["mean"] / c["output_tokens"]["mean"] <= 6 * 1.5


@settings(max_examples=10, deadline=None)
@given(rate=st.floats(0.01, 20.0, allow_subnormal=False), seed=st.integers(0, 1000))
def test_poisson_arrivals_have_the_rate(rate, seed):
    reqs = poisson_requests(SHAREGPT, rate, 4000, seed)
    measured = len(reqs) / reqs[-1].arrival_s
    assert measured == pytest.approx(rate, rel=5 / 4000**0.5)  # 5 sigma of a Poisson count
    again = rescale_arrivals(reqs, 2 * rate)
    assert [r.prompt_tokens for r in again] == [r.prompt_tokens for r in reqs]
    assert (len(again) - 1) / (again[-1].arrival_s - again[0].arrival_s) == pytest.approx(2 * rate)


def test_trace_files_csv_and_jsonl(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens,extra\n2.0,100,5,x\n0.5,3000,20,y\n")
    reqs = load_trace(str(csv))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in reqs] == [(0.5, 3000, 20), (2.0, 100, 5)]
    jl = tmp_path / "t.jsonl"
    jl.write_text(
        "\n".join(
            json.dumps({"arrival_s": a, "prompt_tokens": p, "output_tokens": o}) for a, p, o in [(0, 10, 1), (1, 20, 2)]
        )
    )
    assert len(load_trace(str(jl))) == 2


@pytest.mark.parametrize(
    "text",
    [
        "arrival_s,prompt_tokens\n1,2\n",
        "arrival_s,prompt_tokens,output_tokens\n1,0,3\n",
        "arrival_s,prompt_tokens,output_tokens\n",
        "a,b\nx,y\n",
    ],
)
def test_bad_traces_name_the_problem(tmp_path, text):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(UserError, match="trace file"):
        load_trace(str(p))
    with pytest.raises(UserError, match="does not exist"):
        load_trace(str(tmp_path / "missing.csv"))


@pytest.mark.parametrize(
    "name,text,needle",
    [
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,5\ninf,100,5\n", "line 3: arrival_s inf"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,5\nnan,100,5\n", "line 3: arrival_s nan"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n-1,100,5\n", "line 2: arrival_s -1"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,1000000000,5\n", "16,777,216"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100.5,5\n", "not a whole number"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,x\n", "output_tokens 'x' is not a number"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,100\n", "2 columns"),
        (
            "t.jsonl",
            '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 2}\n{"arrival_s": NaN, "prompt_tokens": 10, "output_tokens": 2}\n',
            "line 2: arrival_s nan",
        ),
        (
            "t.jsonl",
            '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 2}\n',
            "prompt_tokens is true, not a number",
        ),
        ("t.jsonl", '{"arrival_s": "0", "prompt_tokens": 1, "output_tokens": 2}\n', 'arrival_s is "0", not a number'),
        ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 1}\n', "line 1: no output_tokens"),
        ("t.jsonl", '{"arrival_s": 0,\n', "line 1, column"),
        ("t.jsonl", "[1, 2]\n", "a JSON list, not an object"),
    ],
)
def test_trace_rows_are_checked_like_workload_files(tmp_path, name, text, needle):
    """A trace refuses what a workload JSON refuses (a 10^9-token prompt, NaN, infinity), naming the line."""
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(UserError) as e:
        load_trace(str(p))
    assert needle in e.value.line() and "\n" not in e.value.line(), e.value.line()


def test_a_long_trace_streams_from_the_file_when_sorted_and_must_be_sorted(tmp_path, monkeypatch):
    import kttune.sim.workload as W

    rows = [(i * 0.25, 100 + i % 90, 1 + i % 9) for i in range(500)]
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
    held = W.scan_trace(str(p))
    monkeypatch.setattr(W, "IN_MEMORY_ROWS", 100)
    monkeypatch.setattr(W, "CHUNK", 64)
    streamed = W.scan_trace(str(p))
    assert held.arrays is not None and streamed.arrays is None
    for rate in (None, 3.0):
        a = [tuple(map(np.ndarray.tolist, c)) for c in W.TraceStream(held, rate).chunks()]
        b = [tuple(map(np.ndarray.tolist, c)) for c in W.TraceStream(streamed, rate).chunks()]
        assert [x for c in a for x in zip(*c)] == [x for c in b for x in zip(*c)]
    p.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{b},{c}\n" for a, b, c in reversed(rows)))
    with pytest.raises(UserError, match="not in order.*sort it"):
        W.scan_trace(str(p))
