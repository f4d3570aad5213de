"""`kttune simulate`: JSON on stdout with the documented schema, one-line errors on bad input."""

from __future__ import annotations

import json

import pytest

from kttune.cli import main

BASE = ["simulate", "-m", "qwen3-30b-a3b", "--profile", "h200-pcie5-xeon-amx-16c", "--requests", "40"]


def test_json_has_every_schedule_and_the_schema(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 3.0},{2000 + 500 * i},{20}\n" for i in range(10)))
    code = main(["simulate", "-m", "qwen3-30b-a3b", "--profile", "h200-pcie5-xeon-amx-16c", "-w", str(trace),
                 "--tbt-slo", "2s", "--capacity", "--samples", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    d = json.loads(out.out)
    assert d["schema"] == "kttune.simulate/1"
    assert [s["schedule"] for s in d["schedules"]] == ["chunked", "hybrid", "layered"]
    s = d["schedules"][0]
    for key in ("ttft_s", "tbt_ms", "max_tbt_ms", "attainment", "traffic_total", "traffic_prefill_per_prompt",
                "gpu_busy_s", "cpu_busy_s", "samples"):
        assert key in s
    assert set(s["ttft_s"]) == {"p50", "p90", "p99", "mean", "max"}
    assert len(s["samples"]["ttft_s"]) == 10
    assert d["slo"] == {"ttft_s": 10.0, "tbt_ms": 2000.0}
    assert {c["schedule"] for c in d["capacity"]} == {"chunked", "hybrid", "layered"}
    assert d["workload"]["source"] == "trace"


@pytest.mark.parametrize("extra,needle", [
    (["--schedules", "chunked,sarathi"], "sarathi"),
    (["-w", "nope"], "nope"),
    (["--tbt-slo", "fast"], "--tbt-slo"),
    (["--rate", "0"], "rate"),
    (["--gpu-experts", "999"], "--gpu-experts"),
    (["--kt-method", "AMXINT4", "--threshold", "1024"], "crashes"),
    (["--groups", "0"], "--groups"),
])
def test_bad_input_is_one_line(capsys, extra, needle):
    code = main(BASE + extra)
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
