"""Every table kttune prints reads well at 80 columns: rendered on an 80-column console, each table
holds the law of kttune.emit.terminal.fits (no cell wrapped or cut, title and caption on one line,
no line over 80 cells), no cell spans more than two lines by design, and the whole output stays
within 80 cells. Checked on real results: searches and an explanation on the measured H200
profile, every shipped profile, the catalogs."""

from __future__ import annotations

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from kttune import api
from kttune.emit import probe_report, report
from kttune.emit.terminal import fits
from kttune.hw.registry import load_shipped, shipped_names

WIDTH = 80
MEASURED = "h200-pcie5-xeon-amx-16c"


class RecordingConsole(Console):
    """A console 80 columns wide that keeps every table printed to it."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__(width=width, record=True, color_system=None, force_terminal=False, file=open("/dev/null", "w"))
        self.tables: list[Table] = []

    def print(self, *objects, **kw):  # noqa: A003
        self.tables += [o for o in objects if isinstance(o, Table)]
        return super().print(*objects, **kw)


def check(console: RecordingConsole, at_least: int) -> None:
    assert len(console.tables) >= at_least
    for t in console.tables:
        assert fits(t, WIDTH), f"table {t.title!r} does not fit {WIDTH} columns"
        for col in t.columns:
            for cell in col._cells:
                text = cell if isinstance(cell, str) else getattr(cell, "plain", str(cell))
                assert text.count("\n") <= 1, f"a cell of {t.title!r} spans more than two lines: {text!r}"
    for line in console.export_text(clear=False).splitlines():
        assert cell_len(line) <= WIDTH


@pytest.fixture(scope="module")
def searches(tmp_path_factory):
    out = []
    for model, vram, wl, ram in (("kimi-k2-thinking", "140G", "long-context", "1T"), ("qwen3-30b-a3b", "32G", "rag", None),
                                 ("deepseek-v3", "80G", "chat", "2T")):
        inp = api.resolve_inputs(model, vram, 1, MEASURED, wl, host_ram=ram)
        out.append(api.search(inp, trials=120, seed=1, storage=str(tmp_path_factory.mktemp("s") / "s.journal")))
    return out


def test_search_report_fits_80_columns(searches):
    for outcome in searches:
        c = RecordingConsole()
        report.header(c, outcome.inputs.request)
        report.render_search(c, outcome)
        check(c, 3)  # Pareto front, prefill per length, VRAM


def test_wide_terminals_get_the_full_forms(searches):
    c = RecordingConsole(width=200)
    report.render_search(c, searches[0])
    headers = [[col.header for col in t.columns] for t in c.tables]
    assert ["gpu experts", "chunk", "threshold", "max tokens", "threads", "mean prefill", "decode tok/s", "peak GiB"] in headers
    assert any("layerwise only" in h for h in headers)
    narrow = RecordingConsole()
    report.render_search(narrow, searches[0])
    assert len(narrow.tables[0].columns) == 9 and narrow.tables[0].columns[1].header == "GPU\nexperts"


def test_pick_off_the_front_is_listed(searches):
    """The search may snap the pick's threshold to the crossover, off the stored front: the table
    still lists it, marked."""
    for outcome in searches:
        t = report.pareto_table(outcome.result, WIDTH)
        marks = list(t.columns[0]._cells)
        assert marks.count("pick") == 1


def test_explain_fits_80_columns():
    inp = api.resolve_inputs("kimi-k2-thinking", "140G", 1, MEASURED, "long-context", host_ram="1T")
    outcome = api.explain_flags(inp, 43, 32768, 512, 262144, 13)
    c = RecordingConsole()
    report.render_explain(c, outcome)
    check(c, 2)


@pytest.mark.parametrize("name", shipped_names())
def test_profile_show_fits_80_columns(name):
    p = load_shipped(name)
    c = RecordingConsole()
    probe_report.render_profile(p, c)
    check(c, 3)
    text = c.export_text()
    # nothing measured is lost by splitting: every CPU MoE median is still printed
    for curve in p.curves_of("cpu_moe"):
        for pt in curve.points:
            assert f"{pt.x / pt.t_ms * 1e3:,.0f}/s" in text


def test_catalog_listings_fit_80_columns():
    c = RecordingConsole()
    c.print(report.models_table(api.list_models(), WIDTH))
    report.render_profiles(c, api.list_profiles())
    from kttune.search.workload import load_workload, preset_names

    report.render_workloads(c, [load_workload(n) for n in preset_names()])
    check(c, 3)
    text = c.export_text()
    assert "kimi-k2-thinking" in text and "long-context" in text and "h200-pcie5-xeon-amx-16c (default)" in text


def test_simulate_fits_80_columns():
    """The schedules side by side (with the capacity row) on the measured profile."""
    from kttune.emit import simulate_report
    from kttune.sim.inputs import resolve
    from kttune.sim.simulate import simulate

    inp = resolve("qwen3-30b-a3b", MEASURED, None, "summarize", None, 40, 0, 0, 8192, None, 262144, 32, None, 1,
                  ("chunked", "hybrid", "layered"), None, 8192, None, None, 0.0, None)
    rep = simulate(inp, with_capacity=True)
    c = RecordingConsole()
    simulate_report.render(c, rep)
    check(c, 1)
    text = c.export_text()
    # nothing lost by the compact form: every schedule's TTFT p99 and rejected count are printed
    for r in rep.schedules:
        assert simulate_report.ms_short(1e3 * r.ttft_s.p99) in text
    assert "max rate at >= 90% SLO" in text
    wide = RecordingConsole(width=200)
    simulate_report.render(wide, rep)
    assert "TTFT p50 / p90 / p99" in wide.export_text()


def test_paths_fits_80_columns():
    """The path runner's table on the H200 results (the widest numbers measured)."""
    import json
    from pathlib import Path

    from kttune.emit import paths

    doc = json.loads((Path(__file__).resolve().parents[2] / "benchmarks/results/paths-h200-pcie5-xeon-amx-16c.json").read_text())
    for res in doc["results"]:
        c = RecordingConsole()
        paths.render(res, c)
        check(c, 1)
        text = c.export_text()
        assert f"path runner: {res['runs'][0]['model']} {res['runs'][0]['method']}" in text
        assert text.count("thr ") + text.count(" only ") >= len(res["runs"])  # one row per run
    wide = RecordingConsole(width=250)
    paths.render(doc["results"][0], wide)
    assert "mem model GiB" in wide.export_text()


@pytest.mark.parametrize("width", [60, 80])
def test_simulate_progress_fits(width):
    """The simulation's progress bars (a long step name, a count in the millions) on one line each."""
    from kttune.emit.progress import simulate_bar, simulate_updater
    from kttune.emit.terminal import rendered_lines

    prog = simulate_bar(RecordingConsole(width=width))
    on_progress = simulate_updater(prog)
    on_progress("chunked", 3_400_000, 10_000_000)
    on_progress("capacity of layered", 1, 3)
    lines = rendered_lines(prog.get_renderable(), width)
    assert len(lines) == 2 and all(cell_len(ln) <= width for ln in lines), lines
    assert "chunked" in lines[0] and "34%" in lines[0] and "capacity of layered" in lines[1]
    assert "\u2026" not in "".join(lines)


def test_workloads_fit_60_columns():
    from kttune.search.workload import load_workload, preset_names

    c = RecordingConsole(width=60)
    report.render_workloads(c, [load_workload(n) for n in preset_names()])
    assert c.tables and all(fits(t, 60) for t in c.tables)
    text = c.export_text()
    assert all(cell_len(line) <= 60 for line in text.splitlines())
    assert "log-normal" in text and "arxiv-summarize" in text
