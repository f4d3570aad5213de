"""Human-readable reports (rich): what was picked, why, and where the VRAM goes."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kttune.search.explain import Explanation
from kttune.emit.launch import launch_command
from kttune.emit.terminal import first_that_fits, keep_title, ms_or_s, ms_short, tight_table, tokens_short
from kttune.memory.vram import VramBreakdown
from kttune.units import GB, GIB, times_faster


def _tok_s(tokens: int, ms: float | None) -> str:
    return "-" if ms is None else f"{tokens / (ms / 1e3):,.0f}"


def render_notes(console: Console, notes) -> None:
    """Notes and warnings, one per line, printed whole (no markup read in them)."""
    for n in dict.fromkeys(notes):
        console.print(f"note: {n}", style="yellow", markup=False, highlight=False)


def header(console: Console, inp, notes=()) -> None:
    """The model, method, GPUs, budget, profile and workload of a request (`inp`: a SearchRequest),
    then the inputs' notes (`notes`: e.g. a method that does not match the checkpoint, an untested
    family, clipped prompts), printed before any long work so they are seen whatever follows."""
    p = inp.profile.provenance
    kind = {
        "datasheet": "[yellow]derived from datasheets[/]",
        "measured": "[green]measured[/]",
        "mixed": "[yellow]measured + shipped parts[/]",
    }.get(p.kind, p.kind)
    console.print(
        f"[bold]{inp.model.name}[/] ({inp.model.family}, {inp.model.num_experts} experts x top-{inp.model.top_k}, "
        f"{inp.model.num_moe_layers} MoE layers) with [bold]{inp.method}[/] on {inp.tp} GPU(s), "
        f"{inp.budget.vram_bytes_per_gpu / GIB:.1f} GiB VRAM each, {inp.budget.host_ram_bytes / GIB:.0f} GiB host RAM"
    )
    borrowed = f"; GPU curves from {', '.join(p.sources)}" if p.sources and p.kind != "datasheet" else ""
    console.print(
        f"profile: {p.machine} ({kind}{borrowed}); workload: {inp.workload.name} "
        f"(mean prompt {inp.workload.mean_prompt_tokens:,.0f} tokens, {inp.workload.concurrency} concurrent, "
        f"decode weight {inp.workload.decode_weight:g})"
    )
    render_notes(console, notes)


def vram_table(b: VramBreakdown, budget_bytes: int, usable_bytes: int, width: int | None = None) -> Table:
    """Where the VRAM goes, term by term, and when it is taken: sized for 80 columns (labels <= 31
    cells, "when" <= 25), and at `width` where that does not fit, the narrow frame with shorter
    labels and "when" texts."""
    if width is None:
        return _vram_table(b, budget_bytes, usable_bytes, False)
    return first_that_fits(
        width,
        lambda: _vram_table(b, budget_bytes, usable_bytes, False),
        lambda: _vram_table(b, budget_bytes, usable_bytes, True),
    )


_VRAM_SHORT = {
    "CUDA graphs + KT output buffers": "CUDA graphs + KT outputs",
    "lazily, first long prompt": "lazy, 1st long prompt",
    "KV cache (--max-total-tokens)": "KV cache (max tokens)",
    "activations: hidden+residual": "activations: hidden+resid.",
}


def _vram_table(b: VramBreakdown, budget_bytes: int, usable_bytes: int, narrow: bool) -> Table:
    title = "VRAM per GPU (rank 0)"
    t = tight_table(title) if narrow else Table(title=title, show_edge=False)
    t.add_column("item", no_wrap=True)
    t.add_column("GiB", justify="right", no_wrap=True)
    t.add_column("when", no_wrap=True)
    labels = {
        "cuda_context": ("CUDA context + NCCL", "startup"),
        "non_expert_weights": ("non-expert weights / TP", "startup"),
        "gpu_experts": ("resident GPU experts", "startup"),
        "kv_cache": ("KV cache (--max-total-tokens)", "startup"),
        "linear_state": ("linear-attention states", "startup"),
        "req_to_token_pool": ("request pool", "startup"),
        "cuda_graphs": ("CUDA graphs + KT output buffers", "startup"),
        "kt_staging": ("KT staging buffer", "startup"),
        "layerwise_slot": ("layerwise full-layer slot", "lazily, first long prompt"),
        # activations (docs/memory.md#activations-by-phase): persistent + the LARGEST phase count
        "activations_persistent": ("activations: hidden+residual", "each prefill (chunk)"),
        "attention_phase": ("  attention phase", "one phase at a time"),
        "router_phase": ("  router phase", "one phase at a time"),
        "hybrid_moe_phase": ("  hybrid MoE phase", "one phase at a time"),
        "layerwise_moe_activations": ("  layerwise MoE phase", "one phase, lazily"),
        "layerwise_transients": ("  + repack transients", "with layerwise MoE"),
    }
    for k, v in b.items():
        if v:
            name, when = labels.get(k, (k, ""))
            if narrow:
                name, when = _VRAM_SHORT.get(name, name), _VRAM_SHORT.get(when, when)
            t.add_row(name, f"{v / GIB:.2f}", when)
    t.add_row("[bold]runtime peak[/]", f"[bold]{b.runtime_peak_bytes / GIB:.2f}[/]", "")
    t.add_row("budget", f"{budget_bytes / GIB:.2f}", "")
    t.add_row(f"usable after {1 - usable_bytes / budget_bytes:.0%} margin", f"{usable_bytes / GIB:.2f}", "")
    return keep_title(t)


def lengths_table(ex: Explanation, width: int | None = None) -> Table:
    """Prefill per prompt length on both paths and the picked flags; at `width` columns the full
    form if it fits, else the compact one (no per-path throughput, forwards as "2L+1H")."""
    if width is None:
        return _lengths_full(ex)
    return first_that_fits(
        width, lambda: _lengths_full(ex), lambda: _lengths_compact(ex), lambda: _lengths_compact(ex, True)
    )


def _traffic_gb(r) -> str:
    return f"{r.traffic_bytes / GB:,.0f}" if r.traffic_bytes else "-"


def _lengths_full(ex: Explanation) -> Table:
    t = Table(title="Prefill per prompt length (idle server)", show_edge=False)
    for col in (
        "prompt tokens",
        "hybrid only",
        "tok/s",
        "layerwise only",
        "tok/s",
        "picked",
        "tok/s",
        "forwards",
        "PCIe GB",
    ):
        t.add_column(col, justify="left" if col == "forwards" else "right", no_wrap=True)
    for r in ex.rows:
        t.add_row(
            f"{r.prompt_tokens:,}",
            ms_or_s(r.hybrid_ms),
            _tok_s(r.prompt_tokens, r.hybrid_ms),
            ms_or_s(r.layerwise_ms),
            _tok_s(r.prompt_tokens, r.layerwise_ms),
            ms_or_s(r.chosen_ms),
            _tok_s(r.prompt_tokens, r.chosen_ms),
            r.chosen_paths,
            _traffic_gb(r),
        )
    return keep_title(t)


def short_paths(paths: str) -> str:
    """'2 layerwise + 1 hybrid' -> '2L+1H'."""
    return "+".join(f"{n}{kind[:1].upper()}" for n, kind in (part.split(" ", 1) for part in paths.split(" + ") if part))


def _lengths_compact(ex: Explanation, narrow: bool = False) -> Table:
    """`narrow`: the 60-column frame (kttune.emit.terminal.tight_table), its legend on two lines."""
    title = "Prefill per prompt length (idle server)"
    if narrow:
        t = tight_table(title, "forwards: L layerwise, H hybrid;\nPCIe GB: expert weights streamed")
    else:
        t = Table(
            title=title, show_edge=False, caption="forwards: L layerwise, H hybrid; PCIe GB: expert weights streamed"
        )
    for col in (
        "prompt\ntokens",
        "hybrid\nonly",
        "layer-\nwise only" if narrow else "layerwise\nonly",
        "picked",
        "picked\ntok/s",
        "forwards",
        "PCIe\nGB",
    ):
        t.add_column(col, justify="left" if col == "forwards" else "right", no_wrap=True)
    for r in ex.rows:
        t.add_row(
            f"{r.prompt_tokens:,}",
            ms_short(r.hybrid_ms),
            ms_short(r.layerwise_ms),
            ms_short(r.chosen_ms),
            _tok_s(r.prompt_tokens, r.chosen_ms),
            short_paths(r.chosen_paths),
            _traffic_gb(r),
        )
    return keep_title(t)


def render_explanation(
    console: Console, inp, ex: Explanation, argv: list[str], title: str | None, notes: tuple[str, ...] = ()
) -> None:
    """`inp`: the SearchRequest explained; `notes`: more notes to print (e.g. the launch paths');
    `title`: the launch command's heading (None: no command printed)."""
    ev = ex.evaluation
    cfg = ev.cfg
    console.print(lengths_table(ex, console.width))
    cross = f"{ex.crossover_tokens:,} tokens per forward" if ex.crossover_tokens else "none (layerwise never wins)"
    lw = (
        f"layerwise {ms_or_s(ex.layer_layerwise_ms)} (load {ms_or_s(ex.layerwise_load_ms)})"
        if ex.layer_layerwise_ms is not None
        else "layerwise n/a"
    )
    console.print(
        f"one MoE layer at a {cfg.chunked_prefill_size:,}-token chunk: hybrid {ms_or_s(ex.layer_hybrid_ms)}, {lw}; "
        f"crossover: {cross}"
    )
    for r in ex.reasons:
        console.print(f"  - {r}")
    console.print(
        f"decode: {ev.decode_batch} requests at once, {ev.tbt_ms:.1f} ms per step: "
        f"{ev.decode_tok_s_per_request:,.1f} tok/s per request, {ev.decode_tok_s:,.1f} tok/s for the batch "
        f"(CPU handles {(1 - cfg.num_gpu_experts / inp.model.num_experts):.0%} of routed experts)"
    )
    console.print(vram_table(ev.vram, inp.budget.vram_bytes_per_gpu, inp.budget.usable_vram_bytes, console.width))
    console.print(
        f"host RAM: {ev.host.total_bytes / GIB:.1f} GiB (experts {ev.host.cpu_experts / GIB:.1f}, "
        f"CPU scratch {ev.host.cpu_scratch / GIB:.1f}, base {ev.host.base / GIB:.0f}) of "
        f"{inp.budget.host_ram_bytes / GIB:.0f} GiB"
    )
    if not ev.feasible:
        console.print(f"[red]does not fit: {', '.join(ev.violated)}[/]")
    for n in dict.fromkeys(ex.notes + tuple(notes)):
        console.print(f"note: {n}", style="dim", markup=False, highlight=False)
    if title is not None:
        render_command(console, argv, title)


def render_command(console: Console, argv: list[str], title: str) -> None:
    """A launch command under its heading, as a plain block that pastes whole (no panel: its
    borders would be copied with it)."""
    console.rule(f"[bold]{title}[/]", align="left")
    console.print(launch_command(argv), soft_wrap=True, highlight=False, markup=False)


def _front_rows(result) -> list:
    """The Pareto front, the pick where it sits off the front (its threshold snapped to the
    crossover), by prefill time; then the `kt run` defaults."""
    rows = list(result.pareto)
    if all(e is not result.best for e in rows):
        rows = sorted(rows + [result.best], key=lambda e: e.mean_ttft_ms)
    if result.baseline is not None:
        rows.append(result.baseline)
    return rows


def pareto_table(result, width: int | None = None) -> Table:
    """The Pareto front with the pick and the `kt run` defaults: the full form, or at `width`
    columns the compact one (two-line headers, K for 1024 tokens), else the narrow one
    (abbreviated headers with a legend)."""
    if width is None:
        return _pareto_full(result)
    return first_that_fits(
        width,
        lambda: _pareto_full(result),
        lambda: _pareto_compact(result),
        lambda: _pareto_compact(result, narrow=True),
    )


def _pareto_title(result) -> str:
    return f"Pareto front ({len(result.pareto)} of {result.trials_feasible} feasible trials)"


def _row_style(result, e) -> str | None:
    return "bold green" if e is result.best else ("dim" if e is result.baseline else None)


def _peak(e, lines: int = 1) -> str:
    """Peak VRAM in GiB, marked `over` when the configuration does not fit (on a line of its own
    with `lines=2`, so the column stays narrow)."""
    return f"{e.vram.runtime_peak_bytes / GIB:.1f}" + (
        "" if e.feasible else ("\n" if lines == 2 else " ") + "[red]over[/]"
    )


def _pareto_full(result) -> Table:
    t = Table(title=_pareto_title(result), show_edge=False)
    for col in (
        "gpu experts",
        "chunk",
        "threshold",
        "max tokens",
        "threads",
        "mean prefill",
        "decode tok/s",
        "peak GiB",
    ):
        t.add_column(col, justify="right", no_wrap=True)
    for e in _front_rows(result):
        c = e.cfg
        mark = " *" if e is result.best else (" (kt run default)" if e is result.baseline else "")
        t.add_row(
            f"{c.num_gpu_experts}{mark}",
            f"{c.chunked_prefill_size:,}",
            f"{c.gpu_prefill_token_threshold:,}",
            f"{c.max_total_tokens:,}",
            str(c.cpuinfer_threads),
            ms_or_s(e.mean_ttft_ms),
            f"{e.decode_tok_s:,.1f}",
            _peak(e),
            style=_row_style(result, e),
        )
    return keep_title(t)


def _pareto_compact(result, narrow: bool = False) -> Table:
    """Two-line headers, K for 1024 tokens, the over-budget mark on a line of its own; `narrow` (60
    columns): abbreviated headers with a legend, in the tight frame."""
    if narrow:
        t = tight_table(
            _pareto_title(result),
            "exp: GPU experts per layer; thr: threshold;\nKV: max tokens; cpu: --kt-cpuinfer; K = 1024 tokens",
        )
        cols = ("exp", "chunk", "thr", "KV", "cpu", "mean\nprefill", "decode\ntok/s", "peak\nGiB")
    else:
        t = Table(title=_pareto_title(result), show_edge=False, caption="K = 1024 tokens")
        cols = (
            "GPU\nexperts",
            "chunk",
            "thresh",
            "max\ntokens",
            "cpu\ninfer",
            "mean\nprefill",
            "decode\ntok/s",
            "peak\nGiB",
        )
    t.add_column("", no_wrap=True)
    for col in cols:
        t.add_column(col, justify="right", no_wrap=True)
    for e in _front_rows(result):
        c = e.cfg
        mark = "pick" if e is result.best else ("kt run" if e is result.baseline else "")
        t.add_row(
            mark,
            str(c.num_gpu_experts),
            tokens_short(c.chunked_prefill_size),
            tokens_short(c.gpu_prefill_token_threshold),
            tokens_short(c.max_total_tokens),
            str(c.cpuinfer_threads),
            ms_short(e.mean_ttft_ms),
            f"{e.decode_tok_s:,.1f}",
            _peak(e, 2),
            style=_row_style(result, e),
        )
    return keep_title(t)


def render_search_summary(console: Console, result) -> None:
    b = result.best
    console.print(pareto_table(result, console.width))
    base = result.baseline
    if base is not None:
        fit = "" if base.feasible else f" (and it does not fit: {', '.join(base.violated)})"
        parts = [
            f"{what} {times_faster(ours, theirs, lower_is_faster=low)}"
            for what, ours, theirs, low in (
                ("mean prefill", b.mean_ttft_ms, base.mean_ttft_ms, True),
                ("decode", b.decode_tok_s, base.decode_tok_s, False),
            )
            if ours > 0 and theirs > 0
        ]
        console.print(f"against `kt run` defaults: {', '.join(parts)}{fit}")
    if b.cfg.attention_backend:
        console.print(
            f"attention backend: {b.cfg.attention_backend} (its MLA prefill form over a cached prefix: "
            "docs/cost-model.md#mla-prefill-forms)"
        )
    console.print(
        f"[dim]study {result.study_name}: {result.trials_total} trials ({result.trials_new} new) in "
        f"{result.wall_s:.1f} s, storage {result.storage}[/]"
    )


def render_search(console: Console, outcome) -> None:
    """`kttune search`: the front, the pick explained, the launch command (`outcome`: kttune.app.SearchOutcome)."""
    render_search_summary(console, outcome.result)
    slo = outcome.result.slo
    if slo is not None:
        t = slo["target"]
        limits = " and ".join(
            ([f"TTFT <= {t['ttft_s']:g} s"] if t["ttft_s"] is not None else [])
            + ([f"every gap <= {t['tbt_ms']:g} ms"] if t["tbt_ms"] is not None else [])
        )
        console.print(
            f"[green]SLO met[/] at {t['rate_per_s']:g} req/s ({limits}, simulated): {slo['attainment']:.0%} of "
            f"requests pass; 90% see TTFT <= {slo['ttft_needed_s']:.1f} s and every gap <= {slo['tbt_needed_ms']:,.0f} ms"
        )
    render_explanation(
        console,
        outcome.inputs.request,
        outcome.explanation,
        list(outcome.argv),
        "sglang-kt launch command",
        tuple(outcome.result.notes) + outcome.inputs.paths.notes,
    )


def render_explain(console: Console, outcome) -> None:
    """`kttune explain` (`outcome`: kttune.app.ExplainOutcome)."""
    render_explanation(
        console,
        outcome.inputs.request,
        outcome.explanation,
        list(outcome.argv),
        "sglang-kt launch command for these flags",
        outcome.inputs.paths.notes,
    )


def models_table(entries, width: int | None = None) -> Table:
    """The model catalog: every column, or at `width` columns (when that does not fit) name,
    experts, MoE layers, method and grade."""
    if width is None:
        return _models_full(entries)
    return first_that_fits(
        width, lambda: _models_full(entries), lambda: _models_compact(entries), lambda: _models_stacked(entries)
    )


# What the catalog's `grade` column says (docs/model-configs.md#catalog-grades).
# Lines short enough for the compact table at 60 columns (a caption rich wraps does not fit).
GRADE_LEGEND = "grade of the shipped config.json:\nA verbatim copy, B official excerpt,\nC rebuilt from a sibling model"


def _models_full(entries) -> Table:
    t = Table(title="kttune model catalog", show_edge=False, caption=GRADE_LEGEND)
    for col in ("name", "HF repo", "family", "experts", "top-k", "MoE layers", "checkpoint", "KT method", "grade"):
        t.add_column(col, no_wrap=True)
    for e in entries:
        t.add_row(
            e.name,
            e.hf_repo,
            e.family,
            str(e.num_experts),
            str(e.top_k),
            str(e.num_moe_layers),
            e.checkpoint_format,
            e.default_method,
            e.grade,
        )
    return keep_title(t)


def _models_compact(entries) -> Table:
    t = Table(
        title="kttune model catalog",
        show_edge=False,
        caption=f"{GRADE_LEGEND}\nHF repo, family, checkpoint: a wider terminal or --json",
    )
    for col, justify in (
        ("name", "left"),
        ("experts\nx top-k", "right"),
        ("MoE\nlayers", "right"),
        ("KT\nmethod", "left"),
        ("grade", "left"),
    ):
        t.add_column(col, justify=justify, no_wrap=True)
    for e in entries:
        t.add_row(
            e.name,
            f"{e.num_experts} x {e.top_k}",
            str(e.num_moe_layers),
            e.default_method,
            e.grade.replace(" / ", " /\n"),
        )
    return keep_title(t)


def _models_stacked(entries) -> Table:
    """The 60-column form: each model's shape under its name."""
    t = tight_table("kttune model catalog", f"{GRADE_LEGEND}\nHF repo, family, checkpoint:\na wider terminal or --json")
    for col in ("name\nexperts x top-k, MoE layers", "KT\nmethod", "grade"):
        t.add_column(col, no_wrap=True)
    for e in entries:
        t.add_row(
            f"{e.name}\n{e.num_experts} x {e.top_k}, {e.num_moe_layers} layers",
            e.default_method,
            e.grade.replace(" / ", " /\n"),
        )
    return keep_title(t)


def render_profiles(console: Console, listing) -> None:
    """`kttune profiles` (`listing`: kttune.app.ProfileListing). Where the machine column does not fit
    the console, the machines follow the table as lines of their own."""

    def table(with_machine: bool) -> Table:
        t = Table(title="shipped hardware profiles", show_edge=False)
        for col in ("name", "kind") + (("machine",) if with_machine else ()) + ("curves",):
            t.add_column(col, no_wrap=True, justify="right" if col == "curves" else "left")
        for r in listing.shipped:
            t.add_row(
                r.name + (" (default)" if r.default else ""),
                r.kind,
                *((r.machine,) if with_machine else ()),
                str(r.curves),
            )
        return keep_title(t)

    t = first_that_fits(console.width, lambda: table(True), lambda: table(False))
    console.print(t)
    if len(t.columns) == 3:
        for r in listing.shipped:
            console.print(f"  {r.name}: {r.machine}", highlight=False)
    console.print(
        "this machine: "
        + (
            f"probed profile {listing.this_machine} is used by default"
            if listing.this_machine
            else "not probed (`kttune probe` measures it)"
        )
    )


def workloads_table(workloads, describe: bool = True, narrow: bool = False, tight: bool = False) -> Table:
    """The workloads; `narrow` (60 columns) keeps name, form, mean prompt, output and concurrency,
    `tight` draws them in the narrowest frame."""
    title = "workloads (or -w FILE.json / TRACE.csv)"
    t = tight_table(title) if tight else Table(title=title, show_edge=False)
    cols = [
        ("name", lambda w: w.name),
        ("form", lambda w: w.form),
        ("mean\nprompt", lambda w: f"{w.mean_prompt_tokens:,.0f}"),
        ("longest", lambda w: f"{w.max_prompt_tokens:,}"),
        ("output", lambda w: str(w.output_tokens)),
        ("concur-\nrency", lambda w: str(w.concurrency)),
        ("decode\nweight", lambda w: f"{w.decode_weight:g}"),
    ]
    if narrow:
        cols = [c for c in cols if c[0] not in ("longest", "decode\nweight")]
    if describe:
        cols.append(("description", lambda w: w.description))
    for col, _ in cols:
        t.add_column(col, no_wrap=True, justify="left" if col in ("name", "form", "description") else "right")
    for w in workloads:
        t.add_row(*(f(w) for _, f in cols))
    return keep_title(t)


WORKLOADS_USE = (
    "search and explain score each workload's prompt lengths (log-normal: 12 quantile bins) at its "
    "mean output; simulate draws Poisson requests from the same lengths and output (log-normal: from "
    "both distributions), or replays a trace's requests."
)


def render_workloads(console: Console, workloads) -> None:
    """`kttune workloads`: every workload of the shared namespace and what each command uses of it;
    where descriptions do not fit as a column, they follow the table as lines of their own."""
    t = first_that_fits(
        console.width,
        lambda: workloads_table(workloads),
        lambda: workloads_table(workloads, False),
        lambda: workloads_table(workloads, False, narrow=True),
        lambda: workloads_table(workloads, False, narrow=True, tight=True),
    )
    console.print(t)
    if not any(c.header == "description" for c in t.columns):
        for w in workloads:
            console.print(f"  {w.name}: {w.description}", highlight=False)
    console.print(WORKLOADS_USE, highlight=False)
