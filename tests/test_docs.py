"""The documentation holds together: docs/index.md lists every page under docs/, and every relative
link in the README, docs/ and the benchmarks' and fixtures' READMEs reaches a file that exists and,
where it names one, a heading of that file (GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [
    ROOT / "README.md",
    *sorted(DOCS.glob("*.md")),
    ROOT / "benchmarks" / "README.md",
    ROOT / "benchmarks" / "results" / "README.md",
    ROOT / "tests" / "data" / "README.md",
]
# How-tos written on another branch of issue 20 at the same time: listed in docs/index.md before they
# land, checked like every other page once they exist.
HOWTOS = {DOCS / f"howto-add-a-{what}.md" for what in ("model-family", "gpu", "probe", "schedule")}
LINK_RE = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE_RE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation but hyphens and spaces
    dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE_RE.sub("", page.read_text())
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: Path) -> list[str]:
    text = FENCE_RE.sub("", page.read_text())
    return [a or b for a, b in LINK_RE.findall(text)]


def test_anchor_follows_githubs_rule():
    assert (
        anchor("The KV pool, not `--max-running-requests`, bounds concurrency")
        == "the-kv-pool-not---max-running-requests-bounds-concurrency"
    )
    assert (
        anchor("kt-kernel's scratch, read from its source and measured")
        == "kt-kernels-scratch-read-from-its-source-and-measured"
    )
    assert anchor("Measuring honestly (the probes)") == "measuring-honestly-the-probes"


def test_the_index_lists_every_page():
    listed = {(DOCS / t).resolve() for t in links(DOCS / "index.md") if not t.startswith(("http", "#"))}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p != DOCS / "index.md" and p.resolve() not in listed]
    assert not missing, f"docs/index.md does not list {missing}"
    assert HOWTOS <= listed and all(p.exists() for p in HOWTOS)


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page):
    bad = []
    for target in links(page):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            bad.append(f"{target}: no heading #{frag} in {dest.relative_to(ROOT)}")
    assert not bad, bad


def test_the_benchmarks_index_names_every_script():
    """benchmarks/README.md has a row for every benchmark and diagnostic (what it measures, where,
    the command, where its results go)."""
    index = (ROOT / "benchmarks" / "README.md").read_text()
    scripts = [p for p in (ROOT / "benchmarks").glob("*.py") if p.name != "results_layout.py"]
    scripts += [*(ROOT / "benchmarks").glob("*.sh"), *(ROOT / "benchmarks" / "diag").glob("*.py")]
    missing = [
        p.relative_to(ROOT / "benchmarks").as_posix()
        for p in sorted(scripts)
        if f"`{p.relative_to(ROOT / 'benchmarks').as_posix()}`" not in index
    ]
    assert not missing, f"benchmarks/README.md has no row for {missing}"
