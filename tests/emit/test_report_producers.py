"""The report reads the real producers' documents: `kttune paths` (a small CPU run here, and the H200
results fixture, tests/data/paths-h200.json) and `kttune simulate`. The plotted data is read back from the
figures and compared with the documents' own numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kttune.cli import main
from kttune.emit import figures as F
from kttune.emit import markdown_report as M
from tests.helpers import PATHS_H200

H200 = PATHS_H200


def collection(ax, label):
    [c] = [c for c in ax.collections if c.get_label() == label]
    return c


def line(ax, label):
    [ln] = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return ln


@pytest.fixture(scope="module")
def h200() -> dict:
    return json.loads(H200.read_text())


@pytest.fixture(scope="module")
def h200_disturbed(h200) -> dict:
    """The H200 results with one forward made disturbed (its first layer 5x its second, as a kernel
    loaded on first use once made it): the latest runs have none since the runner's fix."""
    import copy

    doc = copy.deepcopy(h200)
    # a run of several forwards: its others still give it a prediction
    run = next(
        r
        for res in doc["results"]
        for r in res["runs"]
        if len(r["forwards"]) > 1 and len(r["forwards"][0]["layer_ms"]) > 1
    )
    f = run["forwards"][0]
    extra = 5 * f["layer_ms"][1] - f["layer_ms"][0]
    f["layer_ms"][0] += extra
    f["attn_ms"][0] += extra
    run["measured_ms"] += extra
    from kttune.hw.registry import resolve_profile
    from kttune.runner.api import repredict

    repredict(doc, resolve_profile("h200-pcie5-xeon-amx-16c", None))  # the runner's own verdict on it
    return doc


@pytest.fixture(scope="module")
def explain_qwen(tmp_path_factory) -> dict:
    """`kttune explain` of the configuration the H200 runner measured (qwen3 BF16, 0 GPU experts, chunk 4096)."""
    out = tmp_path_factory.mktemp("explain") / "e.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(
            [
                "explain",
                "-m",
                "qwen3-30b-a3b",
                "--vram",
                "139G",
                "--gpu-experts",
                "0",
                "--chunk",
                "4096",
                "--threshold",
                "2048",
                "--cpuinfer",
                "13",
                "--profile",
                "h200-pcie5-xeon-amx-16c",
                "--json",
            ]
        )
    assert code in (0, None)
    out.write_text(buf.getvalue())
    return json.loads(out.read_text())


def test_rows_from_the_h200_results_file_carry_the_runs_numbers(h200):
    rows = M.runner_rows(h200)
    runs = [r for res in h200["results"] for r in res["runs"]]
    assert M.classify(h200) == "runner" and len(rows) == len(runs) > 100
    for row, run in zip(rows, runs):
        paths = {f["path"] for f in run["forwards"]}
        assert row["path"] == (run["forced_path"] or (paths.pop() if len(paths) == 1 else "switch"))
        assert (row["tokens"], row["chunk"], row["gpu_experts"]) == (
            run["prompt_tokens"],
            run["chunk"],
            run["gpu_experts"],
        )
        assert (
            row["measured_ms"]
            == run["measured_ms"]
            == pytest.approx(sum(sum(f["layer_ms"]) for f in run["forwards"]), abs=1e-2)
        )
        assert row["predicted_ms"] == run["prediction"]["predicted_ms"]
        assert row["extrapolated_ms"] == run["extrapolated_ms"]
    assert {r["path"] for r in rows} == {"hybrid", "layerwise", "switch"}


def test_calibration_scatter_is_the_rows_predicted_and_measured(h200_disturbed):
    rows = M.runner_rows(h200_disturbed)
    fig = F.fig_calibration(rows)
    ax = fig.axes[0]
    for path in ("hybrid", "layerwise", "switch"):
        want = [[r["predicted_ms"], r["measured_ms"]] for r in rows if r["path"] == path and not r["disturbed"]]
        assert np.allclose(collection(ax, path).get_offsets(), want)
    # runs the runner named disturbed are drawn apart and left out of the error
    bad = [[r["predicted_ms"], r["measured_ms"]] for r in rows if r["disturbed"]]
    assert len(bad) == 1 and np.allclose(collection(ax, "disturbed (left out)").get_offsets(), bad)
    errs = sorted(abs(r["measured_ms"] / r["predicted_ms"] - 1) for r in rows if not r["disturbed"])
    n = len(errs)
    med = errs[n // 2] if n % 2 else (errs[n // 2 - 1] + errs[n // 2]) / 2
    assert (
        f"median |error| {med:.0%}" in ax.get_title() and f"({n} runs, {len(bad)} disturbed left out)" in ax.get_title()
    )


def test_prefill_points_are_the_matching_runs_whole_model_times(h200, explain_qwen):
    rows = M.runner_rows(h200)
    fig = F.fig_prefill(explain_qwen, rows)
    ax_t = fig.axes[0]
    got = sorted(map(tuple, collection(ax_t, "measured layerwise").get_offsets().tolist()))
    # qwen3 BF16 at 0 GPU experts, layerwise, chunk 4096 or one forward that fits it
    want = sorted(
        (r["tokens"], r["extrapolated_ms"] / 1e3)
        for r in rows
        if r["model"] == "qwen3-30b-a3b"
        and r["gpu_experts"] == 0
        and r["path"] == "layerwise"
        and (r["chunk"] == 4096 or r["tokens"] <= min(r["chunk"], 4096))
    )
    assert len(got) == len(want) >= 5 and np.allclose(got, want)
    assert all(r["model"] == "qwen3-30b-a3b" for r in F.runner_points_for(explain_qwen, rows))


def test_report_command_on_the_results_file_and_an_explanation(h200_disturbed, explain_qwen, tmp_path, capsys):
    e = tmp_path / "explain.json"
    e.write_text(json.dumps(explain_qwen))
    results = tmp_path / "paths.json"
    results.write_text(json.dumps(h200_disturbed))
    code = main(["report", str(e), str(results), "-o", str(tmp_path / "r"), "--json"])
    assert code in (0, None)
    written = json.loads(capsys.readouterr().out)
    names = [Path(f["path"]).name for f in written["figures"]]
    assert names == ["prefill.png", "vram.png", "calibration.png"]
    md = (tmp_path / "r" / "report.md").read_text()
    rows = M.runner_rows(h200_disturbed)
    assert f"{sum(1 for r in rows if not r['disturbed'])} runs: median" in md and "disturbed left out" in md


def test_small_cpu_run_reports_its_measurements(tmp_path, capsys):
    """A real small-shape run of `kttune paths --report`: the rows are its runs, unpredicted, so the
    report holds their table and no calibration figure; the saved documents rebuild it."""
    out, rep = tmp_path / "r.json", tmp_path / "rep"
    code = main(
        [
            "paths",
            "qwen3-30b-a3b",
            "--small",
            "--layers",
            "1",
            "--chunks",
            "64",
            "--prompts",
            "100",
            "--cpuinfer",
            "1",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--report",
            str(rep),
        ]
    )
    assert code in (0, None)
    capsys.readouterr()
    d = json.loads(out.read_text())
    [row] = M.runner_rows(d)
    [run] = d["runs"]
    assert (row["path"], row["tokens"], row["chunk"]) == ("switch", 100, 64)
    assert row["measured_ms"] == run["measured_ms"] > 0 and row["predicted_ms"] is None
    md = (rep / "report.md").read_text()
    assert "none predicted" in md and "calibration.png" not in md
    assert f"| switch | 0 | 100 | 64 | {run['measured_ms']:,.1f} |  |" in md
    again = M.write_report(tmp_path / "again", M.read_inputs([rep]))
    assert again.markdown.read_text().split("\n", 3)[3] == md.split("\n", 3)[3]  # same but the timestamp line


def test_simulate_report_draws_the_simulated_requests(tmp_path, capsys):
    rep = tmp_path / "rep"
    trace = tmp_path / "t.csv"
    trace.write_text(
        "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 3.0},{2000 + 500 * i},20\n" for i in range(10))
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
            "--samples",
            "--json",
            "--report",
            str(rep),
        ]
    )
    out = capsys.readouterr()
    assert code in (0, None), out.err
    d = json.loads(out.out)  # stdout holds the JSON alone; the report line went to stderr
    assert "report:" in out.err
    assert "schedules.png" in (rep / "report.md").read_text()
    fig = F.fig_schedules(M.sim_result(d))
    ax_ttft, ax_tbt, _ = fig.axes[:3]
    for s in d["schedules"]:
        assert list(line(ax_ttft, s["schedule"]).get_xdata()) == pytest.approx(sorted(s["samples"]["ttft_s"]))
        assert list(line(ax_tbt, s["schedule"]).get_xdata()) == pytest.approx(sorted(s["samples"]["max_tbt_ms"]))
    [saved] = M.read_inputs([rep]).sims
    assert saved.pop("schema") == "kttune.schedules/1"  # the report's simulation.json, in the envelope
    assert saved == M.sim_result(d)


def test_the_repeats_interval_is_drawn_as_a_bar(h200_disturbed):
    """A run measured through the protocol (`timing`) carries its interval to the rows and the figure:
    one vertical bar per such run, from its low to its high."""
    import copy

    doc = copy.deepcopy(h200_disturbed)
    run = doc["results"][0]["runs"][0]
    m = run["measured_ms"]
    run["timing"] = {
        "measured_ms": {"median": m, "low": 0.9 * m, "high": 1.2 * m, "n": 3},
        "extrapolated_ms": {"median": run["extrapolated_ms"], "low": 1.0, "high": 2.0, "n": 3},
    }
    rows = M.runner_rows(doc)
    row = rows[0]
    assert (row["measured_low_ms"], row["measured_high_ms"]) == (0.9 * m, 1.2 * m)
    assert all("measured_low_ms" not in r for r in rows[1:])
    ax = F.fig_calibration(rows).axes[0]
    (bars,) = [c for c in ax.containers if c.lines and c.lines[2]]
    seg = bars.lines[2][0].get_segments()
    assert len(seg) == 1 and np.allclose([seg[0][0][1], seg[0][1][1]], [0.9 * m, 1.2 * m])
