"""`kttune search --measure` end to end (evaluator: the cost model, since the path runner needs its
machine; the study machinery is the same)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from kttune.cli import main

BASE = [
    "search",
    "-m",
    "qwen3-30b-a3b",
    "--vram",
    "32G",
    "--profile",
    "h200-pcie5-xeon-amx-16c",
    "-w",
    "long-context",
    "--seed",
    "1",
]


def test_measured_search_json(tmp_path, capsys):
    code = main(
        BASE
        + [
            "--measure",
            "--evaluator",
            "model",
            "--trials",
            "10",
            "--budget",
            "5m",
            "--storage",
            str(tmp_path / "s.journal"),
            "--json",
        ]
    )
    cap = capsys.readouterr()
    assert code == 0, cap.err
    doc = json.loads(cap.out)
    pick = doc["measured_pick"]["measured_tok_s"]
    assert doc["model_pick"]["measured_tok_s"] <= pick
    names = [b["name"] for b in doc["baselines"]]
    assert names == ["kt run defaults", "kt run interactive defaults", "KT layerwise doc example"]
    for b in doc["baselines"]:
        assert b["state"] == ("complete" if b["fits"] else "infeasible")
        if b["fits"]:
            assert b["measured_tok_s"] <= pick
    assert 10 <= doc["study"]["measured_trials"] <= 11
    assert "--chunked-prefill-size" in doc["command"]


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--measure", "--budget", "ten"], "--budget"),
        (["--budget", "10m"], "--measure"),
        (["--measure", "--evaluator", "oracle"], "unknown evaluator"),
    ],
)
def test_bad_measured_options(capsys, extra, needle):
    code = main(BASE + extra)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err


@pytest.mark.skipif(importlib.util.find_spec("kttune.runner") is not None, reason="the path runner is installed")
def test_runner_evaluator_missing_is_a_one_line_error(capsys):
    code = main(BASE + ["--measure"])
    err = capsys.readouterr().err
    assert code == 2 and "--evaluator model" in err


@pytest.mark.parametrize("json_out", [True, False])
@pytest.mark.parametrize("measure", [True, False])
def test_a_torn_journal_repair_is_reported(tmp_path, capsys, monkeypatch, measure, json_out):
    """A real Optuna journal torn by a crash: `kttune search` and `kttune search --measure` both cut
    it back and say so, in the human report and in --json's `notes`."""
    from tests.helpers import TORN_TAIL, set_aside, torn_journal

    monkeypatch.setenv("COLUMNS", "200")
    journal = tmp_path / "s.journal"
    torn_journal(journal)
    extra = ["--measure", "--evaluator", "model", "--trials", "3"] if measure else ["--trials", "20"]
    code = main(BASE + extra + ["--storage", str(journal)] + (["--json"] if json_out else []))
    cap = capsys.readouterr()
    assert code == 0, cap.err
    human = " ".join((cap.err if json_out else cap.out).split())
    assert f"note: journal {journal}: set aside a torn last record" in human
    if json_out:
        (note,) = [n for n in json.loads(cap.out)["notes"] if "set aside a torn last record" in n]
        assert [b for _, b in set_aside(note)] == [TORN_TAIL]
    assert TORN_TAIL not in journal.read_bytes()


def test_measured_search_honours_report(tmp_path, capsys):
    """`--measure --report DIR` writes the report of the measured search (it used to be ignored):
    the measured section, the document it comes from, and `kttune report DIR` rebuilds it."""
    out = tmp_path / "rep"
    code = main(
        BASE
        + [
            "--measure",
            "--evaluator",
            "model",
            "--trials",
            "4",
            "--storage",
            str(tmp_path / "s.journal"),
            "--report",
            str(out),
        ]
    )
    cap = capsys.readouterr()
    assert code == 0, cap.err
    md = (out / "report.md").read_text()
    assert "## Measured search" in md and "kt run defaults" in md
    saved = json.loads((out / "measured.json").read_text())
    assert saved["schema"] == "kttune.search-measured/1" and saved["measured_pick"]["name"]
    again = tmp_path / "again"
    assert main(["report", str(out), "--out", str(again)]) == 0
    assert "## Measured search" in (again / "report.md").read_text()
