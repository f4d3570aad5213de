"""The search report compares the pick with the `kt run` defaults in words that read at once."""

from __future__ import annotations

import re

from kttune.cli import main
from kttune.units import times_faster

WORDS = r"(\d+(?:\.\d)?x (?:faster|slower)|the same)"


def test_the_kt_run_comparison_says_faster_or_slower_with_a_factor_of_at_least_one(capsys):
    # seed 1, 60 trials: a pick whose decode is slower than the kt run defaults' (prefill is faster)
    argv = [
        "search",
        "-m",
        "qwen3-30b-a3b",
        "--vram",
        "32G",
        "--trials",
        "60",
        "--seed",
        "1",
        "--storage",
        ":memory:",
        "--json",
    ]
    assert main(argv) == 0
    out = capsys.readouterr()
    [line] = [ln for ln in out.err.splitlines() if ln.startswith("against `kt run` defaults")]
    m = re.fullmatch(rf"against `kt run` defaults: mean prefill {WORDS}, decode {WORDS}", line)
    assert m, line
    import json

    doc = json.loads(out.out)
    best, base = doc["pick"]["predicted"], doc["kt_run_default"]["predicted"]
    assert m.group(1) == times_faster(best["mean_prefill_ms"], base["mean_prefill_ms"], lower_is_faster=True)
    assert m.group(2) == times_faster(best["decode_tok_s"], base["decode_tok_s"], lower_is_faster=False)
    assert "0." not in line.split(":", 1)[1]  # never "0.89x"


def test_lab_notes_stay_in_the_file_and_out_of_what_users_read(capsys):
    """Shipped profiles keep how they were assembled (device runs, re-measurements) in
    provenance.lab_notes: `kttune profiles` and `kttune profile show` leave them out, --json keeps them."""
    import json

    from kttune.hw.registry import load_shipped, shipped_names

    with_lab = [n for n in shipped_names() if load_shipped(n).provenance.lab_notes]
    assert with_lab  # the measured H200 profiles carry some
    assert main(["profiles"]) == 0
    listing = capsys.readouterr().out
    for name in shipped_names():
        p = load_shipped(name)
        assert main(["profile", "show", name]) == 0
        shown = capsys.readouterr().out
        for note in p.provenance.lab_notes:
            head = note[:40]
            assert head not in " ".join(shown.split()) and head not in " ".join(listing.split())
        for note in p.provenance.notes:  # the user's notes are all there
            assert note[:40] in " ".join(shown.split())
        assert "device tool" not in shown + listing and "another engineer" not in shown
        assert main(["profile", "show", name, "--json"]) == 0
        assert tuple(json.loads(capsys.readouterr().out)["provenance"].get("lab_notes", ())) == p.provenance.lab_notes


def test_the_catalog_says_what_its_grade_column_means(capsys, monkeypatch):
    for width in ("200", "80", "60"):
        monkeypatch.setenv("COLUMNS", width)
        assert main(["models"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "grade" in out and "A verbatim copy, B official excerpt, C rebuilt from a sibling model" in out
