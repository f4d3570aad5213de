"""Every table and progress bar kttune prints reads well at 80 and at 60 columns: rendered on a
console that wide, each table holds the law of kttune.emit.terminal.fits (no cell wrapped or cut,
title and caption on one line, no line over the width), no cell spans more than two lines by
design, and the whole output stays within the width (a launch command's lines excepted where one
flag and its value are longer: the command pastes whole). Checked on real results for every
command: searches (one with the `kt run` row over budget), explanations of flags and of a launch
command, a measured search, every shipped profile, the catalogs, simulate, the path runner,
validate against the stand-in server, and the progress bars of search, measure and probe."""

from __future__ import annotations

import re

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from kttune import app
from kttune.app import resolve
from kttune.units import GIB
from kttune.emit import probe_report, report
from kttune.emit.terminal import fits
from kttune.hw.registry import load_shipped, shipped_names

WIDTHS = (80, 60)
MEASURED = "h200-pcie5-xeon-amx-16c"
RTX4090 = "datasheet-rtx4090-pcie4-xeon-amx-64c"
# a launch command's line that cannot break: one flag (and its value), an env assignment, the program
UNBREAKABLE = re.compile(r"^\s*(--\S+( \S+)?|[A-Z_]+=\S+|python -m sglang\.launch_server)( \\)?$")


class RecordingConsole(Console):
    """A console `width` columns wide that keeps every table printed to it."""

    def __init__(self, width: int) -> None:
        super().__init__(width=width, record=True, color_system=None, force_terminal=False, file=open("/dev/null", "w"))
        self.tables: list[Table] = []

    def print(self, *objects, **kw):  # noqa: A003
        self.tables += [o for o in objects if isinstance(o, Table)]
        return super().print(*objects, **kw)


def check(console: RecordingConsole, at_least: int) -> None:
    width = console.width
    assert len(console.tables) >= at_least
    for t in console.tables:
        assert fits(t, width), f"table {t.title!r} does not fit {width} columns"
        for col in t.columns:
            for cell in col._cells:
                text = cell if isinstance(cell, str) else getattr(cell, "plain", str(cell))
                assert text.count("\n") <= 1, f"a cell of {t.title!r} spans more than two lines: {text!r}"
    for line in console.export_text(clear=False).splitlines():
        assert cell_len(line) <= width or UNBREAKABLE.match(line), f"{cell_len(line)} > {width}: {line!r}"


@pytest.fixture(scope="module")
def searches(tmp_path_factory):
    out = []
    for model, vram, wl, ram, prof in (
        ("kimi-k2-thinking", "140G", "long-context", "1T", MEASURED),
        ("qwen3-30b-a3b", "32G", "rag", None, MEASURED),
        ("deepseek-v3", "80G", "chat", "2T", MEASURED),
        ("qwen3-30b-a3b", "8G", "rag", None, RTX4090),
    ):  # the kt run row over budget
        inp = app.resolve_inputs(
            model, resolve.vram_bytes(vram), 1, prof, wl, host_ram_bytes=resolve.host_ram_bytes(ram)
        )
        out.append(app.search(inp, trials=120, seed=1, storage=str(tmp_path_factory.mktemp("s") / "s.journal")))
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_search_report_fits(searches, width):
    assert not searches[-1].result.baseline.feasible  # the case of the issue: `8.9 ov…`, `prefi…`
    for outcome in searches:
        c = RecordingConsole(width)
        report.header(c, outcome.inputs.request)
        report.render_search(c, outcome)
        check(c, 3)  # Pareto front, prefill per length, VRAM
        text = c.export_text()
        assert "over" in text or outcome.result.baseline.feasible  # the over-budget mark survives the compact forms


def test_wide_terminals_get_the_full_forms(searches):
    c = RecordingConsole(200)
    report.render_search(c, searches[0])
    headers = [[col.header for col in t.columns] for t in c.tables]
    assert [
        "gpu experts",
        "chunk",
        "threshold",
        "max tokens",
        "threads",
        "mean prefill",
        "decode tok/s",
        "peak GiB",
    ] in headers
    assert any("layerwise only" in h for h in headers)
    narrow = RecordingConsole(80)
    report.render_search(narrow, searches[0])
    assert len(narrow.tables[0].columns) == 9 and narrow.tables[0].columns[1].header == "GPU\nexperts"


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_is_lost_at_narrow_widths(searches, width):
    """The narrow forms keep every value of the Pareto front and the prefill table."""
    from kttune.emit.terminal import ms_short

    outcome = searches[1]
    c = RecordingConsole(width)
    report.render_search(c, outcome)
    text = c.export_text()
    for e in outcome.result.pareto:
        assert ms_short(e.mean_ttft_ms) in text and f"{e.decode_tok_s:,.1f}" in text
    for r in outcome.explanation.rows:
        assert f"{r.prompt_tokens:,}" in text and ms_short(r.chosen_ms) in text


def test_pick_off_the_front_is_listed(searches):
    """The search may snap the pick's threshold to the crossover, off the stored front: the table
    still lists it, marked."""
    for outcome in searches:
        for width in WIDTHS:
            t = report.pareto_table(outcome.result, width)
            marks = [str(m) for m in t.columns[0]._cells]
            assert sum(m.startswith("pick") for m in marks) == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_explain_fits(width):
    inp = app.resolve_inputs("kimi-k2-thinking", 140 * GIB, 1, MEASURED, "long-context", host_ram_bytes=1024 * GIB)
    outcome = app.explain_flags(inp, 43, 32768, 512, 262144, 13)
    c = RecordingConsole(width)
    report.render_explain(c, outcome)
    check(c, 2)


@pytest.mark.parametrize("width", WIDTHS)
def test_explain_of_a_launch_command_fits(width):
    from pathlib import Path

    from kttune.app import explain_command
    from kttune.emit.launch_report import render_launch_explain

    doc = (Path(__file__).resolve().parents[1] / "fixtures" / "kt-layerwise-doc-launch.sh").read_text()
    outcome = explain_command(
        doc, model="minimax-m2", profile=MEASURED, host_ram_bytes=512 * GIB, trials=60, storage=":memory:"
    )
    c = RecordingConsole(width)
    render_launch_explain(c, outcome)
    check(c, 3)  # prefill per length, VRAM, what kttune would change
    assert "what kttune would change" in c.export_text()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", shipped_names())
def test_profile_show_fits(name, width):
    p = load_shipped(name)
    c = RecordingConsole(width)
    probe_report.render_profile(p, c)
    check(c, 3)
    text = c.export_text()
    # nothing measured is lost by splitting: every CPU MoE median is still printed
    for curve in p.curves_of("cpu_moe"):
        for pt in curve.points:
            assert f"{pt.x / pt.t_ms * 1e3:,.0f}/s" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_catalog_listings_fit(width):
    c = RecordingConsole(width)
    c.print(report.models_table(app.list_models().entries, width))
    report.render_profiles(c, app.list_profiles())
    from kttune.search.workload import load_workload, preset_names

    report.render_workloads(c, [load_workload(n) for n in preset_names()])
    check(c, 3)
    text = c.export_text()
    assert "kimi-k2-thinking" in text and "long-context" in text and "h200-pcie5-xeon-amx-16c (default)" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_fits(width):
    """The schedules side by side (with the capacity row) on the measured profile."""
    from kttune.emit import simulate_report
    from kttune.app import simulate, simulation_inputs

    inp = simulation_inputs(
        "qwen3-30b-a3b",
        MEASURED,
        None,
        "summarize",
        None,
        40,
        0,
        0,
        8192,
        None,
        262144,
        32,
        None,
        1,
        ("chunked", "hybrid", "layered"),
        None,
        8192,
        None,
        None,
        0.0,
        None,
    )
    rep = simulate(inp, with_capacity=True)
    c = RecordingConsole(width)
    simulate_report.render(c, rep)
    check(c, 1)
    text = c.export_text()
    # nothing lost by the compact form: every schedule's TTFT p99 and rejected count are printed
    for r in rep.schedules:
        assert simulate_report.ms_short(1e3 * r.ttft_s.p99) in text
    assert "max rate at >= 90% SLO" in text or "max req/s, 90% SLO" in text
    wide = RecordingConsole(200)
    simulate_report.render(wide, rep)
    assert "TTFT p50 / p90 / p99" in wide.export_text()


@pytest.mark.parametrize("width", WIDTHS)
def test_paths_fits(width):
    """The path runner's table on the H200 results (the widest numbers measured)."""
    import json

    from kttune.emit import paths
    from tests.helpers import PATHS_H200

    doc = json.loads(PATHS_H200.read_text())
    for res in doc["results"]:
        c = RecordingConsole(width)
        paths.render(res, c)
        check(c, 1)
        text = c.export_text()
        assert f"{res['runs'][0]['model']} {res['runs'][0]['method']}" in text
        assert text.count("thr ") + text.count(" only ") >= len(res["runs"])  # one row per run
    wide = RecordingConsole(250)
    paths.render(doc["results"][0], wide)
    assert "mem model GiB" in wide.export_text()


@pytest.fixture(scope="module")
def measured():
    from kttune.app.measured import make_evaluator, measured_result

    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, 1, MEASURED, "rag")
    return measured_result(inp, make_evaluator(inp, "model"), trials=6, seed=1, storage=":memory:", model_trials=60)


@pytest.mark.parametrize("width", WIDTHS)
def test_measured_search_fits(measured, width):
    """`search --measure` (the model as evaluator: the same table the runner fills)."""
    from kttune.emit.measured_report import render_measured

    c = RecordingConsole(width)
    render_measured(c, measured)
    check(c, 1)
    text = c.export_text()
    for r in [measured.best, *measured.model_candidates, *measured.baselines]:
        assert f"{r.cfg.num_gpu_experts}" in text


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    import os

    os.environ["KTTUNE_STANDIN_STARTUP_S"] = "0.2"
    try:
        inp = app.resolve_inputs("kimi-k2-thinking", 140 * GIB, 1, MEASURED, "chat", host_ram_bytes=1024 * GIB)
        return app.validate(
            inp,
            2,
            4096,
            2048,
            65536,
            repeats=1,
            server_module="kttune.validate.standin",
            log_path=str(tmp_path_factory.mktemp("v") / "s.log"),
            write_profile=False,
        )
    finally:
        os.environ.pop("KTTUNE_STANDIN_STARTUP_S", None)


@pytest.mark.parametrize("width", WIDTHS)
def test_validate_fits(validated, width):
    from kttune.emit.validate_report import render_validation

    c = RecordingConsole(width)
    render_validation(c, validated)
    check(c, 2)


# ---- progress bars --------------------------------------------------------------------------------


def _bar_lines(prog, width: int) -> list[str]:
    from kttune.emit.terminal import rendered_lines

    return rendered_lines(prog.get_renderable(), width)


@pytest.mark.parametrize("width", WIDTHS + (160,))
def test_progress_bars_fit(width):
    """The probe's bar (a long step description, an hour in) and the bars of search and measure
    (their labels and status texts): every line within the width, nothing cut, the counts, times
    and status whole; wide terminals keep the one-line form."""
    from rich.progress import TextColumn

    from kttune.emit.progress import FittedProgress, ProbeProgress

    console = Console(width=width, file=open("/dev/null", "w"), force_terminal=False)
    probe = ProbeProgress(console)
    probe.plan(345, "probe (quick)")
    probe.step("pipeline Kimi-K2 RAWINT4 threads=13 slots2-e2-r4-stream", advance=123)
    probe.progress.tasks[0].start_time -= 3725  # an hour in: h:mm:ss
    bars = [(probe.progress, ("123/345", "1:02:05", "threads=13 slots2-e2-r4-stream"))]
    for label, status in (("searching", "best mean prefill 1.42 s"), ("measuring", "best 5,423 tok/s")):
        bar = FittedProgress(
            TextColumn(label), "best", console, transient=True
        )  # as search_progress / measure_progress
        bar.add_task(label, total=300, completed=120, best=status)
        bars.append((bar, ("120/300", label, status)))
    for prog, whole in bars:
        lines = _bar_lines(prog, width)
        assert all(cell_len(ln) <= width for ln in lines) and fits(prog.get_renderable(), width), lines
        text = "\n".join(lines)
        assert all(w in text for w in whole) and "\u2026" not in text, lines
        assert len(lines) == (1 if width >= 160 else 2)


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_progress_fits(width):
    """The simulation's progress bars (a long step name, a count in the millions) on one line each."""
    from kttune.emit.progress import simulate_bar, simulate_updater

    console = Console(width=width, file=open("/dev/null", "w"), force_terminal=False)
    prog = simulate_bar(console)
    on_progress = simulate_updater(prog)
    on_progress("chunked", 3_400_000, 10_000_000)
    on_progress("capacity of layered", 1, 3)
    lines = _bar_lines(prog, width)
    assert len(lines) == 2 and all(cell_len(ln) <= width for ln in lines), lines
    assert "chunked" in lines[0] and "34%" in lines[0] and "capacity of layered" in lines[1]
    assert "\u2026" not in "".join(lines)
