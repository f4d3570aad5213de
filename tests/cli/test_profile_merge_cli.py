"""`kttune profile merge`: probes of one machine taken at other times, merged into their median
profile, which `kttune profile show` and a search read; what cannot be merged is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kttune.cli import main
from kttune.hw.probe_median import PROBES_KEY
from kttune.hw.profile import load_profile

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks/results"
H100B = [
    str(RESULTS / "2026-12-05-h100-pcie5-xeon-amx-16c" / f"quick-transfer-h100b{s}.profile.json")
    for s in ("", "-again", "-late")
]
H200 = str(RESULTS / "2026-12-04-h200-pcie5-xeon-amx-16c" / "quick-transfer-a.profile.json")


def test_merge_writes_the_median_that_show_and_search_read(tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["profile", "merge", *H100B, "-o", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    p = load_profile(out)
    assert d["fingerprint"] == p.fingerprint == load_profile(H100B[0]).fingerprint
    assert p.provenance.command.startswith("kttune profile merge ")
    assert [s.split(":")[0] for s in p.provenance.sources] == [Path(f).name for f in H100B]
    assert any(len(pt.extra.get(PROBES_KEY, ())) == 3 for c in p.curves for pt in c.points)
    assert main(["profile", "show", str(out)]) == 0
    assert "median over those of the 3 probes" in capsys.readouterr().out
    argv = ["search", "-m", "qwen3-30b-a3b", "--vram", "30G", "--profile", str(out), "--trials", "20"]
    assert main([*argv, "--seed", "1", "--storage", str(tmp_path / "s.journal"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pick"]


@pytest.mark.parametrize(
    "args,needle",
    [
        ([H100B[0]], "needs two or more, got 1"),
        ([H100B[0], H200], "another machine"),
        ([H100B[0], "/nonexistent/p.json"], "does not exist"),
        ([H100B[0], "h200-pcie5-xeon-amx-16c"], "does not exist"),  # files only: a shipped name is no probe here
    ],
)
def test_what_cannot_be_merged_is_one_line_exit_2(args, needle, tmp_path, capsys):
    out = tmp_path / "m.json"
    assert main(["profile", "merge", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]
    assert not out.exists()


def test_merge_refuses_to_write_over_a_probe_it_reads(tmp_path, capsys):
    import shutil

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    shutil.copy(H100B[0], a)
    shutil.copy(H100B[1], b)
    before = a.read_bytes()
    assert main(["profile", "merge", str(a), str(b), "-o", str(a)]) == 2
    assert "this command's probe" in capsys.readouterr().err and a.read_bytes() == before
