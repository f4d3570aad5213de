"""`kttune explain -- COMMAND`: what kttune read from a user's sglang-kt launch command, how
sglang-kt runs it (defaults taken, values fitted to the profile), the explanation, and what the
search would change and why (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kttune.emit.report import render_command, render_explanation
from kttune.emit.terminal import first_that_fits, keep_title, ms_or_s, ms_short
from kttune.spec.launch_args import FLAG, flag_name
from kttune.units import GIB, times_faster


def _read_line(parsed) -> str:
    parts = []
    for key, v in parsed.values.items():
        name = FLAG[key].names[0]
        parts.append(name if v is True else f"{name} {v}")
    return "read from the command: " + ", ".join(parts)


def _compare_rows(yours, pick) -> list[tuple[str, str, str]]:
    return [
        ("mean prefill", ms_or_s(yours.mean_ttft_ms), ms_or_s(pick.mean_ttft_ms)),
        (
            "decode per request",
            f"{yours.decode_tok_s_per_request:,.1f} tok/s",
            f"{pick.decode_tok_s_per_request:,.1f} tok/s",
        ),
        (
            "decode, batch",
            f"{yours.decode_tok_s:,.1f} tok/s ({yours.decode_batch})",
            f"{pick.decode_tok_s:,.1f} tok/s ({pick.decode_batch})",
        ),
        (
            "runtime peak VRAM",
            f"{yours.vram.runtime_peak_bytes / GIB:.1f} GiB" + ("" if yours.feasible else " over"),
            f"{pick.vram.runtime_peak_bytes / GIB:.1f} GiB",
        ),
    ]


def changes_table(outcome, changes, width: int | None = None) -> Table:
    """The flags the search would change (`changes`: the outcome's `changes`) and the predicted effect, yours
    against kttune's; at `width` columns the full form if it fits, else units in the caption."""
    yours, pick = outcome.explained.evaluation, outcome.search.best

    def build(short: bool) -> Table:
        t = Table(title="what kttune would change (its search, same inputs)", show_edge=False)
        t.add_column("", no_wrap=True)
        t.add_column("yours", justify="right", no_wrap=True)
        t.add_column("kttune", justify="right", no_wrap=True)
        for c in changes:
            t.add_row(c.flag, c.yours, c.kttune)
        for label, a, b in _compare_rows(yours, pick):
            if short and label.startswith("decode"):
                a, b = a.replace(" tok/s", ""), b.replace(" tok/s", "")
            t.add_row(label, a, b, style="bold" if label == "mean prefill" else None)
        if short:
            t.caption = "decode in tok/s; (n): requests decoded at once"
        return keep_title(t)

    return build(False) if width is None else first_that_fits(width, lambda: build(False), lambda: build(True))


def render_launch_explain(console: Console, outcome) -> None:
    """`outcome`: kttune.app.launch_explain.LaunchExplainOutcome."""
    parsed = outcome.parsed
    console.print(_read_line(parsed), highlight=False, markup=False)
    console.print("as sglang-kt 0.7.2 runs it:", highlight=False)
    for n in outcome.notes:
        console.print(f"  - {n}", highlight=False, markup=False)
    ex = outcome.explained
    render_explanation(console, ex.inputs.request, ex.explanation, list(ex.argv), None)
    if outcome.search is None:
        if outcome.search_problem:
            console.print(
                f"kttune's search finds nothing better: {outcome.search_problem.line()}", markup=False, highlight=False
            )
        return
    changes = outcome.changes
    console.print(changes_table(outcome, changes, console.width))
    for c in changes:
        console.print(f"  {c.flag}: {c.why}", highlight=False, markup=False)
    if not changes:
        console.print("  kttune picks the same flags", highlight=False)
    word = times_faster(outcome.search.best.mean_ttft_ms, ex.evaluation.mean_ttft_ms, lower_is_faster=True)
    word = "as fast as yours" if word == "the same" else f"{word} than yours"
    console.print(
        f"kttune's pick: mean prefill {word} ({ms_short(outcome.search.best.mean_ttft_ms)} against "
        f"{ms_short(ex.evaluation.mean_ttft_ms)})",
        highlight=False,
    )
    render_command(console, list(outcome.search.argv), f"kttune's launch command ({flag_name('model_path')} kept)")
