"""The report of `kttune search --measure`: the measured pick, the model's pick and candidates, and the
baselines, each with its measured prefill throughput. Rich table and a JSON-able dict."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kttune.emit.report import render_notes
from kttune.emit.terminal import first_that_fits, keep_title, tight_table, tokens_short


def _tok(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def rows(res) -> list:
    return [res.best, *res.model_candidates, *res.baselines]


def _title(res) -> str:
    return f"measured prefill throughput (evaluator: {res.evaluator}; request-weighted over {len(res.lengths)} prompt lengths)"


def _state(r) -> str:
    return (r.race_status or r.state) if r.fits else "does not fit the budget"


def _full(res) -> Table:
    t = Table(title=_title(res), show_edge=False)
    for col in (
        "configuration",
        "chunk",
        "threshold",
        "GPU exp.",
        "cpuinfer",
        "measured tok/s",
        "vs measured pick",
        "predicted tok/s",
        "state",
    ):
        t.add_column(col, justify="right" if col not in ("configuration", "state") else "left", no_wrap=True)
    top = res.best.measured_tok_s or 0.0
    for r in rows(res):
        c = r.cfg
        t.add_row(
            r.name,
            f"{c.chunked_prefill_size}",
            f"{c.gpu_prefill_token_threshold}",
            f"{c.num_gpu_experts}",
            f"{c.cpuinfer_threads}",
            _measured(r, False),
            _rel(r, top),
            _tok(r.predicted_tok_s),
            _state(r),
        )
    return keep_title(t)


def _measured(r, compact: bool) -> str:
    """The race's median and interval where raced (compact: the median over its relative half-width)."""
    e = r.estimate
    if e is None:
        return _tok(r.measured_tok_s)
    if not compact:
        return e.short()
    return _tok(e.median) + (f"\n±{e.half_width_rel:.0%}" if e.low != e.high else "")


def _rel(r, top: float, compact: bool = False) -> str:
    """Against the measured pick: the paired ratio with its interval where raced, else the plain ratio."""
    v = r.vs_best
    if v is not None and v.low != v.high:
        return f"{v.ratio:.0%}±{(v.high - v.low) / 2:.0%}" if compact else f"{v.ratio:.1%} [{v.low:.0%}-{v.high:.0%}]"
    return f"{r.measured_tok_s / top:.1%}" if r.measured_tok_s and top else "-"


def _name(name: str, width: int) -> str:
    """A configuration's name broken at word boundaries into at most two lines (designed breaks)."""
    import textwrap

    lines = textwrap.wrap(name, width) or [name]
    return "\n".join(lines[:1] + [" ".join(lines[1:])]) if len(lines) > 1 else lines[0]


def _compact(res, stacked: bool) -> Table:
    """80 columns: abbreviated headers with a legend, names on two lines, the tight frame; 60
    (`stacked`): each configuration on two lines, paired values sharing a cell."""
    t = tight_table(
        f"measured prefill throughput ({res.evaluator}),\nrequest-weighted over {len(res.lengths)} prompt lengths",
        "meas.: measured tok/s (±: half its interval); pred.: the\ncost model's; vs pick: against the "
        "measured pick; K = 1024",
    )
    if stacked:
        cols = ("configuration", "chunk\nthresh", "GPU\ncpu", "meas.\nvs pick", "pred.\ntok/s", "state")
    else:
        cols = (
            "configuration",
            "chunk",
            "thresh",
            "GPU\nexp.",
            "cpu\ninfer",
            "meas.\ntok/s",
            "vs\npick",
            "pred.\ntok/s",
            "state",
        )
    for col in cols:
        t.add_column(col, justify="left" if col in ("configuration", "state") else "right", no_wrap=True)
    top = res.best.measured_tok_s or 0.0
    for r in rows(res):
        c = r.cfg
        chunk, thr = tokens_short(c.chunked_prefill_size), tokens_short(c.gpu_prefill_token_threshold)
        state = "over budget" if not r.fits else (r.race_status or r.state)
        if stacked:
            t.add_row(
                _name(r.name, 16),
                f"{chunk}\n{thr}",
                f"{c.num_gpu_experts}\n{c.cpuinfer_threads}",
                f"{_tok(r.estimate.median if r.estimate else r.measured_tok_s)}\n{_rel(r, top, True)}",
                _tok(r.predicted_tok_s),
                state.replace(" ", "\n", 1),
            )
        else:
            t.add_row(
                _name(r.name, 18),
                chunk,
                thr,
                str(c.num_gpu_experts),
                str(c.cpuinfer_threads),
                _measured(r, True),
                _rel(r, top, True),
                _tok(r.predicted_tok_s),
                state,
            )
    return keep_title(t)


def render_measured(console: Console, res) -> None:
    console.print(
        first_that_fits(console.width, lambda: _full(res), lambda: _compact(res, False), lambda: _compact(res, True))
    )
    if res.decision:
        console.print(f"decision ({res.race_rounds} interleaved rounds): {res.decision}", highlight=False)
    for r in res.baselines:
        if r.notes:
            console.print(f"{r.name}: " + "; ".join(r.notes))
    console.print(
        f"study {res.study_name} in {res.storage}: {res.trials_measured} measured trials "
        f"({res.trials_pruned} stopped early by the signed-rank test, {res.trials_new} run now), "
        f"{res.trials_infeasible} configurations skipped as over budget; {res.wall_s:.0f} s"
    )
    render_notes(console, res.notes)
