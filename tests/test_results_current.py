"""The computed results the README's accuracy table reads are what the code at HEAD computes from
their measurements (benchmarks/recompute.py): a change to the cost model, a probe rule or a constant
that moves a published figure fails here until the results are recomputed
(`python3 benchmarks/recompute.py --write`, then the manifest and `scripts/readme_figures.py --write`).
On 2026-12-05 eleven of them were found a day stale, moved by a change of the expert-shape-law
constants that recomputed none."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import script

ROOT = Path(__file__).resolve().parents[1]


RECOMPUTE = script("benchmarks/recompute.py")
FIGURES = script("scripts/readme_figures.py")


def _computed_inputs() -> set[str]:
    """The files in a computed folder that the README's accuracy table reads."""
    out: set[str] = set()
    for v in FIGURES.ACCURACY.values():
        for f in v if isinstance(v, tuple) else (v,):
            if Path(f).parent.name.endswith("-computed"):
                out.add(f)
    return out


def test_every_computed_input_of_the_readme_has_a_recipe():
    made = {f"{r.folder}/{f}" for r in RECOMPUTE.recipes() for f in r.files}
    assert _computed_inputs() <= made, sorted(_computed_inputs() - made)


def test_the_comparison_finds_a_moved_number_a_missing_key_and_nothing_else():
    old = {"rows": [{"raw": 0.152, "n": 22}], "note": "a", "gone": 1}
    assert RECOMPUTE.differences(old, old) == []
    assert RECOMPUTE.differences(old, {**old, "rows": [{"raw": 0.1524, "n": 22}]}) == []  # within 0.5%
    new = {"rows": [{"raw": 0.158, "n": 22}], "note": "a"}
    assert RECOMPUTE.differences(old, new) == ["gone: only in the committed file", "rows[0].raw: 0.152 -> 0.158"]


@pytest.mark.parametrize("recipe", RECOMPUTE.recipes(), ids=lambda r: r.name)
def test_the_committed_result_is_what_head_computes(recipe, tmp_path):
    for f, diffs in RECOMPUTE.check(recipe, tmp_path).items():
        assert not diffs, f"{f} is stale ({len(diffs)} differences, first: {diffs[:3]}): run python3 " + (
            f"benchmarks/recompute.py --write {recipe.name}"
        )


@pytest.mark.parametrize("recipe", RECOMPUTE.recipes(), ids=lambda r: r.name)
def test_a_computed_result_names_no_path_of_this_checkout(recipe):
    """A committed result that holds this checkout's absolute path reads differently in every other
    clone (CI checks out elsewhere): on 2026-12-07 hybrid-intercept.json held /work/main/... and CI
    failed on it. Results name folders relative to benchmarks/results."""
    for f in recipe.files:
        text = (ROOT / "benchmarks" / "results" / recipe.folder / f).read_text()
        assert str(ROOT) not in text, f"{recipe.folder}/{f} holds {ROOT}: write paths relative to benchmarks/results"


def test_write_rewrites_a_recipe_only_where_its_results_moved(tmp_path):
    """`recompute.py --write` leaves a result that recomputes as committed untouched (its provenance and
    rounding with it), and replaces one that moved, with every file its command wrote."""
    cmd = (
        "import json, pathlib, sys; out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True); "
        "(out / 'r.json').write_text(json.dumps({'x': 1.0, 'created': 'now'})); (out / 'r.md').write_text('new')"
    )
    recipe = RECOMPUTE.Recipe("r", (sys.executable, "-c", cmd, "{out}"), ("r.json",), "c")
    results = tmp_path / "results"
    folder = results / "c"
    folder.mkdir(parents=True)
    kept = '{"x": 1.002, "created": "then"}'  # within the 0.5% agreement
    (folder / "r.json").write_text(kept)
    (folder / "r.md").write_text("old")
    assert not RECOMPUTE.write(recipe, tmp_path / "s1", results)
    assert (folder / "r.json").read_text() == kept and (folder / "r.md").read_text() == "old"
    (folder / "r.json").write_text('{"x": 2.0, "created": "then"}')  # moved
    assert RECOMPUTE.write(recipe, tmp_path / "s2", results)
    assert '"x": 1.0' in (folder / "r.json").read_text() and (folder / "r.md").read_text() == "new"
    (folder / "r.json").unlink()  # a new result is written
    assert RECOMPUTE.write(recipe, tmp_path / "s3", results) and (folder / "r.json").exists()
