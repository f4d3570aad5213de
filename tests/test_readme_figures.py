"""The figures of README.md and docs/*.md are what the code at HEAD makes (scripts/readme_figures.py):
every generated block, and the configuration each PNG under docs/figures/ shows. A change that moves
one fails here until `python scripts/readme_figures.py --write` is rerun."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import script

from kttune.cli import main

ROOT = Path(__file__).resolve().parents[1]
R = script("scripts/readme_figures.py")


def test_every_readme_block_is_what_head_makes():
    blocks: dict[str, tuple[str, str]] = {}
    for page in R.PAGES:
        for m in R.BLOCK_RE.finditer(page.read_text()):
            where = page.relative_to(ROOT).as_posix()
            assert m.group("name") not in blocks, (
                f"block {m.group('name')!r} in {blocks[m.group('name')][0]} and {where}"
            )
            blocks[m.group("name")] = (where, m.group("body"))
    assert set(blocks) == set(R.BLOCKS)
    for name, make in R.BLOCKS.items():
        where, body = blocks[name]
        assert body == make(), f"{where} block {name!r} is stale: run python scripts/readme_figures.py --write"


def test_the_main_job_and_the_accuracy_table_are_in_the_readme():
    """What a user reads first: the main job's pick and how accurate kttune is."""
    names = [m.group("name") for m in R.BLOCK_RE.finditer(R.README.read_text())]
    assert "main-job" in names and "accuracy" in names


def test_each_figure_shows_the_configuration_head_picks():
    for name, want in R.figure_descriptions().items():
        assert R.png_text(R.FIGURES / name).get(R.PNG_KEY) == want, f"docs/figures/{name} is stale"


def test_the_main_job_block_is_what_the_command_prints(capsys):
    """The script computes through kttune.app with the study in memory; the command, with its
    default journal storage, picks the same."""
    assert main(["search", "--model", R.MAIN_JOB["model"], "--vram", R.MAIN_JOB["vram"], "--seed", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pick"]["flags"] == R.main_job()["pick"]["flags"]
    got, made = doc["pick"]["predicted"], R.main_job()["pick"]["predicted"]
    assert got["mean_prefill_ms"] == pytest.approx(made["mean_prefill_ms"]) and got["decode_tok_s"] == pytest.approx(
        made["decode_tok_s"]
    )


def test_png_text_reads_what_matplotlib_writes(tmp_path):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    fig.add_subplot().plot([0, 1])
    text = "chunk 16,384 — é"  # outside latin-1 too: matplotlib writes it as iTXt
    fig.savefig(tmp_path / "f.png", format="png", metadata={R.PNG_KEY: text, "Title": "plain"})
    got = R.png_text(tmp_path / "f.png")
    assert got[R.PNG_KEY] == text and got["Title"] == "plain"
