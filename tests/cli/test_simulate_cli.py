"""`kttune simulate`: JSON on stdout with the documented schema, one-line errors on bad input."""

from __future__ import annotations

import json

import pytest

from kttune.cli import main

BASE = ["simulate", "-m", "qwen3-30b-a3b", "--profile", "h200-pcie5-xeon-amx-16c", "--requests", "40"]


def test_json_has_every_schedule_and_the_schema(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 3.0},{2000 + 500 * i},{20}\n" for i in range(10))
    )
    code = main(
        [
            "simulate",
            "-m",
            "qwen3-30b-a3b",
            "--profile",
            "h200-pcie5-xeon-amx-16c",
            "-w",
            str(trace),
            "--tbt-slo",
            "2s",
            "--capacity",
            "--samples",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    d = json.loads(out.out)
    assert d["schema"] == "kttune.simulate/1"
    assert [s["schedule"] for s in d["schedules"]] == ["chunked", "hybrid", "layered"]
    s = d["schedules"][0]
    for key in (
        "ttft_s",
        "tbt_ms",
        "max_tbt_ms",
        "attainment",
        "traffic_total",
        "traffic_prefill_per_prompt",
        "gpu_busy_s",
        "cpu_busy_s",
        "samples",
    ):
        assert key in s
    assert set(s["ttft_s"]) == {"p50", "p90", "p99", "mean", "max"}
    assert len(s["samples"]["ttft_s"]) == 10
    assert d["slo"] == {"ttft_s": 10.0, "tbt_ms": 2000.0}
    assert {c["schedule"] for c in d["capacity"]} == {"chunked", "hybrid", "layered"}
    assert d["workload"]["source"] == "trace"


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--schedules", "chunked,sarathi"], "sarathi"),
        (["-w", "nope"], "nope"),
        (["--tbt-slo", "fast"], "--tbt-slo"),
        (["--rate", "0"], "rate"),
        (["--gpu-experts", "999"], "--gpu-experts"),
        (["--kt-method", "AMXINT4", "--threshold", "1024"], "crashes"),
        (["--groups", "0"], "--groups"),
        (["--rate", "nan"], "--rate nan"),
        (["--rate", "inf"], "--rate inf"),
        (["--router-skew", "nan"], "--router-skew"),
        (["--router-skew", "inf"], "--router-skew"),
        (["--from-search", "missing.json"], "does not exist"),
    ],
)
def test_bad_input_is_one_line(capsys, extra, needle):
    code = main(BASE + extra)
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


def test_search_with_an_slo_reports_the_check(capsys, tmp_path):
    code = main(
        [
            "search",
            "-m",
            "qwen3-30b-a3b",
            "--vram",
            "80G",
            "--profile",
            "h200-pcie5-xeon-amx-16c",
            "-w",
            "chat",
            "--trials",
            "20",
            "--seed",
            "0",
            "--storage",
            str(tmp_path / "s.journal"),
            "--rate",
            "0.01",
            "--ttft-slo",
            "60s",
            "--tbt-slo",
            "3000ms",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    d = json.loads(out.out)
    assert d["slo"]["met"] and d["slo"]["target"] == {
        "rate_per_s": 0.01,
        "ttft_s": 60.0,
        "tbt_ms": 3000.0,
        "target_attainment": 0.9,
        "requests": 200,
        "seed": 0,
    }
    assert "SLO met" in out.err


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--ttft-slo", "10s"], "--rate"),
        (["--rate", "1.5"], "--ttft-slo"),
        (["--rate", "-1", "--tbt-slo", "150ms"], "--rate"),
        (["--rate", "1.5", "--tbt-slo", "soon"], "--tbt-slo"),
    ],
)
def test_search_slo_options_bad_input(capsys, tmp_path, extra, needle):
    code = main(["search", "-m", "qwen3-30b-a3b", "--vram", "80G", "--storage", str(tmp_path / "s.journal"), *extra])
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err


def test_search_with_an_slo_nothing_meets_names_the_limit(capsys, tmp_path):
    code = main(
        [
            "search",
            "-m",
            "qwen3-30b-a3b",
            "--vram",
            "80G",
            "--profile",
            "h200-pcie5-xeon-amx-16c",
            "-w",
            "summarize",
            "--trials",
            "15",
            "--seed",
            "0",
            "--storage",
            str(tmp_path / "s.journal"),
            "--rate",
            "1.5",
            "--ttft-slo",
            "10s",
            "--tbt-slo",
            "150ms",
        ]
    )
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("error: ")]
    assert code == 1 and len(lines) == 1  # "nothing feasible" answers 1 (kttune.cli.common)
    assert "TTFT:" in lines[0] and "TBT:" in lines[0] and "over)" in lines[0] and "req/s" in lines[0]


def test_every_workload_of_the_namespace_simulates(capsys):
    """Search's presets (rag: lengths) and the paper's sets (log-normal) in one namespace."""
    for wl, form in (("rag", "lengths"), ("arxiv-summarize", "log-normal")):
        code = main(BASE + ["-w", wl, "--schedules", "chunked", "--json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        d = json.loads(out.out)["workload"]
        assert (d["name"], d["form"], d["source"]) == (wl, form, "preset")


def test_without_a_model_or_a_search_result_says_so(capsys):
    assert main(["simulate", "--requests", "5"]) == 2
    assert "--from-search" in capsys.readouterr().err


def test_simulating_a_search_pick_reproduces_its_slo_check(capsys, tmp_path):
    """--from-search takes the pick's flags, the workload and the SLO's rate, limits, requests and
    seed: its chunked schedule is the search's own SLO check, run again through simulate."""
    res = tmp_path / "r.json"
    code = main(
        [
            "search",
            "-m",
            "qwen3-30b-a3b",
            "--vram",
            "80G",
            "--profile",
            "h200-pcie5-xeon-amx-16c",
            "-w",
            "chat",
            "--trials",
            "20",
            "--seed",
            "0",
            "--storage",
            str(tmp_path / "s.journal"),
            "--rate",
            "0.05",
            "--ttft-slo",
            "30s",
            "--tbt-slo",
            "1500ms",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    res.write_text(out.out)
    doc = json.loads(out.out)
    code = main(["simulate", "--from-search", str(res), "--schedules", "chunked", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    d = json.loads(out.out)
    assert d["flags"] == doc["pick"]["flags"] and d["workload"]["name"] == "chat"
    assert (
        d["slo"] == {"ttft_s": 30.0, "tbt_ms": 1500.0} and d["workload"]["requests"] == doc["slo"]["target"]["requests"]
    )
    assert d["schedules"][0]["attainment"] == doc["slo"]["attainment"]
    assert d["schedules"][0]["ttft_attainment"] == doc["slo"]["ttft_attainment"]
    # an option given overrides the pick
    assert main(["simulate", "--from-search", str(res), "--schedules", "chunked", "--chunk", "4096", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flags"]["chunked_prefill_size"] == 4096
    # an explanation of the same flags is simulated the same way
    f = doc["pick"]["flags"]
    code = main(
        [
            "explain",
            "-m",
            "qwen3-30b-a3b",
            "--vram",
            "80G",
            "--profile",
            "h200-pcie5-xeon-amx-16c",
            "-w",
            "chat",
            "--gpu-experts",
            str(f["num_gpu_experts"]),
            "--chunk",
            str(f["chunked_prefill_size"]),
            "--threshold",
            str(f["gpu_prefill_token_threshold"]),
            "--max-total-tokens",
            str(f["max_total_tokens"]),
            "--cpuinfer",
            str(f["cpuinfer_threads"]),
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    ex = tmp_path / "e.json"
    ex.write_text(out.out)
    assert (
        main(
            [
                "simulate",
                "--from-search",
                str(ex),
                "--schedules",
                "chunked",
                "--rate",
                "0.05",
                "--requests",
                "200",
                "--ttft-slo",
                "30s",
                "--tbt-slo",
                "1500ms",
                "--json",
            ]
        )
        == 0
    )
    again = json.loads(capsys.readouterr().out)
    assert again["flags"] == d["flags"] and again["schedules"][0]["attainment"] == d["schedules"][0]["attainment"]


def test_a_file_that_is_not_a_search_result_is_refused(capsys, tmp_path):
    for body in (
        '{"schema": "kttune.simulate/1"}',
        "[1, 2]",
        "{oops",
        '{"model": {"name": "qwen3-30b-a3b"}, "workload": {}, "pick": {"flags": {"chunked_prefill_size": "big"}}}',
        '{"model": {"name": "qwen3-30b-a3b"}, "workload": {}, "pick": {"flags": {}}, "slo": {"target": {"rate_per_s": "fast"}}}',
        '{"model": {"name": "qwen3-30b-a3b"}, "workload": {}, "pick": {"flags": {}}, "slo": {"target": {"requests": 0}}}',
        '{"model": {"name": 5}, "workload": {}, "pick": {"flags": {}}}',
        '{"model": {"name": "qwen3-30b-a3b"}, "workload": {"prompt_tokens": [-1]}, "pick": {"flags": {}}}',
    ):
        f = tmp_path / "x.json"
        f.write_text(body)
        code = main(["simulate", "--from-search", str(f)])
        err = capsys.readouterr().err
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and "search result" in lines[0], err
