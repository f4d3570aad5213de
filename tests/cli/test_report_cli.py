"""`kttune report` end to end: saved `kttune search --json` and a shipped profile in, report.md and
PNGs out; bad input exits 2 with one line."""

from __future__ import annotations

import json

from kttune.cli import main
from pathlib import Path

PROFILE = Path(__file__).resolve().parents[2] / "profiles" / "h200-pcie5-xeon-amx-16c.json"


def test_report_from_saved_search_and_profile(capsys, tmp_path):
    code = main(
        [
            "search",
            "--model",
            "qwen3-30b-a3b",
            "--vram",
            "32G",
            "--profile",
            "h200-pcie5-xeon-amx-16c",
            "--trials",
            "80",
            "--seed",
            "2",
            "--storage",
            str(tmp_path / "s.journal"),
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    (tmp_path / "search.json").write_text(out.out)
    code = main(["report", str(tmp_path / "search.json"), str(PROFILE), "--out", str(tmp_path / "rep"), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    written = json.loads(out.out)
    assert written["markdown"] == str(tmp_path / "rep" / "report.md")
    names = [f["path"].rsplit("/", 1)[1] for f in written["figures"]]
    assert names == ["prefill.png", "vram.png", "pareto.png", "cpu-moe.png", "h2d.png", "pipeline.png"]
    assert all("NVIDIA H200" in f["provenance"] for f in written["figures"])


def test_report_bad_input_is_one_line(capsys, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2")
    assert main(["report", str(bad), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not valid JSON" in err[0]


def test_search_report_dir_with_json_keeps_stdout_json(capsys, tmp_path):
    code = main(
        [
            "search",
            "--model",
            "qwen3-30b-a3b",
            "--vram",
            "32G",
            "--profile",
            "h200-pcie5-xeon-amx-16c",
            "--trials",
            "60",
            "--seed",
            "4",
            "--storage",
            str(tmp_path / "s.journal"),
            "--json",
            "--report",
            str(tmp_path / "rep"),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)  # stdout: the JSON alone
    assert f"report: {tmp_path / 'rep' / 'report.md'}" in out.err
    rep = tmp_path / "rep"
    assert json.loads((rep / "result.json").read_text())["pick"] == doc["pick"]
    assert json.loads((rep / "profile.json").read_text())["fingerprint"] == doc["profile"]["fingerprint"]
    for name in ("prefill", "vram", "pareto", "cpu-moe", "h2d", "pipeline"):
        assert f"]({name}.png)" in (rep / "report.md").read_text() and (rep / f"{name}.png").stat().st_size > 10_000


def test_probe_report_dir(capsys, tmp_path):
    """A real (small) CPU probe of this machine with --report: its CPU MoE figure, and stage A only
    as a table (no figure draws it)."""
    code = main(
        [
            "probe",
            "--quick",
            "--cpu-only",
            "--methods",
            "BF16",
            "--threads",
            "1,2",
            "--max-tokens",
            "4",
            "--fresh",
            "--out",
            str(tmp_path / "p.json"),
            "--report",
            str(tmp_path / "rep"),
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "](cpu-moe.png)" in md and "h2d.png" not in md  # no GPU here: no copy figure
    assert json.loads((tmp_path / "rep" / "profile.json").read_text()) == json.loads((tmp_path / "p.json").read_text())
