"""The report of `kttune validate`: what the server did, prediction against measurement per prompt
length and per layerwise part, the corrections written. Rich tables and a JSON-able dict."""

from __future__ import annotations


from rich.console import Console
from rich.table import Table

from kttune.emit.launch import launch_command
from kttune.emit.terminal import first_that_fits, keep_title, ms_or_s, tight_table


def render_validation(console: Console, outcome) -> None:
    res = outcome.result
    console.print("[bold]server command[/] (run in its own process group):")
    console.print(launch_command(["python", "-m"] + res.argv[2:]), soft_wrap=True, markup=False)
    if res.ok:
        console.print(
            f"[green]server ready after {res.ready_s:.0f} s[/] and served every prompt; the first was exactly "
            f"the chunk size ({res.chunk_prompt_tokens:,} tokens)"
        )
    else:
        kind = res.failure.kind if res.failure else "timeout"
        console.print(f"[red]{kind}[/] during {res.stage}: {res.reason}")
    s = res.log.startup
    parts = []
    if s.weights_usage_gib is not None:
        parts.append(f"weights {s.weights_usage_gib:.2f} GiB ({s.weights_avail_gib:.2f} free after)")
    if s.kv_tokens is not None:
        parts.append(f"KV pool {s.kv_tokens:,} tokens = {s.kv_gib:.2f} GiB")
    if s.pool_end_avail_gib is not None:
        parts.append(f"{s.pool_end_avail_gib:.2f} GiB free after the pools")
    if s.graph_end_avail_gib is not None:
        parts.append(f"{s.graph_end_avail_gib:.2f} GiB free after CUDA graphs")
    if parts:
        console.print("start-up (server log): " + ", ".join(parts))
    cmp = res.comparison
    if cmp is not None:
        w = console.width
        console.print(first_that_fits(w, lambda: _lengths_table(cmp, False), lambda: _lengths_table(cmp, True)))
        if cmp.parts:
            console.print(first_that_fits(w, lambda: _parts_table(cmp, False), lambda: _parts_table(cmp, True)))
        from kttune.calibration.entries import entry_factor

        for k in cmp.corrections:
            applied = "" if ":" in k["path"] else " (MoE-layer time, applied by the cost model)"
            console.print(
                f"correction {k['path']} {k['method']}: x{entry_factor(k):.3g} from {k['points']} measurements{applied}"
            )
    if outcome.profile_written:
        console.print(f"corrections written to {outcome.profile_written}")
    console.print(f"server log: {res.log_path}")


def _frame(title: str, tight: bool) -> Table:
    return tight_table(title) if tight else Table(title=title, show_edge=False)


def _lengths_table(cmp, tight: bool) -> Table:
    """Prediction against the server's TTFT per prompt length; `tight`: the 60-column frame."""
    t = _frame("prefill: predicted vs measured TTFT (median)", tight)
    for col in (
        "prompt\ntokens" if tight else "prompt tokens",
        "forwards",
        "predicted",
        "measured",
        "measured/\npredicted" if tight else "measured / predicted",
    ):
        t.add_column(col, justify="right", no_wrap=True)
    for c in cmp.lengths:
        paths = "+".join(sorted(set(c.paths))) if len(set(c.paths)) > 1 else f"{len(c.paths)} x {c.paths[0]}"
        t.add_row(f"{c.prompt_tokens:,}", paths, ms_or_s(c.predicted_ms), ms_or_s(c.measured_ms), f"{c.ratio:.3g}")
    return keep_title(t)


def _parts_table(cmp, tight: bool) -> Table:
    """Prediction against KT's layerwise log lines per part; `tight`: the 60-column frame."""
    t = _frame("KT layerwise log lines, per MoE layer (median)", tight)
    for col in ("part", "predicted", "logged", "lines", "logged/\npredicted" if tight else "logged / predicted"):
        t.add_column(col, justify="right", no_wrap=True)
    for p in cmp.parts:
        t.add_row(p.part, ms_or_s(p.predicted_ms), ms_or_s(p.measured_ms), str(p.samples), f"{p.ratio:.3g}")
    return keep_title(t)
