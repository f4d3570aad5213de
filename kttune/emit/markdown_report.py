"""A Markdown report with PNG figures, written into a directory: from search/explain results,
measured searches, hardware profiles, path-runner results and simulation results (the JSON
documents kttune prints). A document is told apart by its `schema` (kttune.schema); one written
before the envelope existed, by its keys (`classify`).

`kttune report FILE.json...` rebuilds a report from saved documents; `--report DIR` on the commands
that produce them writes one directly. Every figure carries its provenance (kttune.emit.figures),
repeated in the caption under it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from kttune.bounds import read_json_file
from kttune.documents import REPORT_MARK, document_of
from kttune.errors import UserError
from kttune.paths import replace_atomically
from kttune.schema import doc_kind, enveloped, kttune_version
from kttune.units import GIB


@dataclass
class ReportInputs:
    """What a report is built from. Each list holds plain JSON-ready documents."""

    results: list[dict] = field(default_factory=list)  # `kttune search --json` / `kttune explain --json`
    profiles: list[dict] = field(default_factory=list)  # hardware profiles (`kttune probe --json`)
    runs: list[dict] = field(default_factory=list)  # path-runner rows (schema: figures.fig_calibration)
    sims: list[dict] = field(default_factory=list)  # simulation results (schema: figures.fig_schedules)
    measured: list[dict] = field(default_factory=list)  # `kttune search --measure --json`
    # Where each document came from (id of the document -> its file), for documents read from files
    # the user named: a document a figure cannot read is then bad input naming the file, not a bug.
    origins: dict[int, str] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.results or self.profiles or self.runs or self.sims or self.measured)


@dataclass(frozen=True)
class FigureFile:
    path: Path
    title: str
    provenance: str


@dataclass(frozen=True)
class WrittenReport:
    markdown: Path
    figures: tuple[FigureFile, ...]
    documents: tuple[Path, ...] = ()

    def to_dict(self) -> dict:
        """`kttune report --json`: what was written."""
        return enveloped(
            "report",
            {
                "markdown": str(self.markdown),
                "figures": [{"path": str(f.path), "title": f.title, "provenance": f.provenance} for f in self.figures],
            },
        )


# ---- reading documents ---------------------------------------------------------------------------
# Adapter points: the path runner and the simulator print their own JSON; `runner_rows` and
# `sim_result` turn a document into the schemas the figures take. Extend them there.


def runner_rows(doc: Any) -> list[dict] | None:
    """Path-runner rows {path, tokens, chunk, predicted_ms, measured_ms, ...} from a runner document,
    or None when `doc` is not one. Accepts `kttune paths --json` ({"request", "runs": [PathRun.to_dict
    with "prediction"]}, docs/path-runner.md), a results file holding several under "results"
    (benchmarks/results/2026-12-01-h200-pcie5-xeon-amx-16c/paths.json), and rows already in this schema ({"runs": rows} or a list).

    From a PathRun: `path` is the forced path, else the one path its forwards took, else "switch";
    `tokens` the prompt; `measured_ms` the K layers' wall clock over the whole prompt and
    `predicted_ms` the raw cost model's time for the same K layers and forwards (None for
    small-shape runs, which are not predicted); `extrapolated_ms` the measured time carried to the
    whole model (what fig_prefill draws); `disturbed` when the runner named a forward of the run
    disturbed (docs/path-runner.md: its K identical layers over 3x apart); the repeats' intervals
    (`measured_low_ms`/`measured_high_ms`, `extrapolated_low_ms`/`extrapolated_high_ms`) where the
    run has them; also model, method, gpu_experts, threshold, layers."""
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        parts = [runner_rows(d) for d in doc["results"]]
        if parts and all(p is not None for p in parts):
            return [r for p in parts for r in p]
        return None
    rows = doc.get("runs") if isinstance(doc, dict) else doc
    if not (isinstance(rows, list) and rows and all(isinstance(r, dict) and "measured_ms" in r for r in rows)):
        return None
    if all("forwards" in r and "prompt_tokens" in r for r in rows):
        return [_from_path_run(r) for r in rows]
    if all("predicted_ms" in r for r in rows):
        return rows
    return None


def _from_path_run(r: dict) -> dict:
    paths = sorted({f["path"] for f in r["forwards"]})
    path = r.get("forced_path") or (paths[0] if len(paths) == 1 else "switch")
    return {
        "path": path,
        "tokens": r["prompt_tokens"],
        "chunk": r["chunk"],
        "predicted_ms": (r.get("prediction") or {}).get("predicted_ms"),
        "measured_ms": r["measured_ms"],
        "extrapolated_ms": r.get("extrapolated_ms"),
        "model": r.get("model"),
        "method": r.get("method"),
        "gpu_experts": r.get("gpu_experts"),
        "threshold": r.get("threshold"),
        "layers": r.get("layers_run"),
        "forwards": len(r["forwards"]),
        "device": r.get("device"),
        "disturbed": bool((r.get("prediction") or {}).get("disturbed_forwards")),
        **_spread(r),
    }


def _spread(r: dict) -> dict:
    """The repeats' intervals of a run that has them (`timing`, kttune.protocol): measured_low_ms,
    measured_high_ms, extrapolated_low_ms, extrapolated_high_ms."""
    out = {}
    for key in ("measured_ms", "extrapolated_ms"):
        e = (r.get("timing") or {}).get(key)
        if e and e.get("n", 1) >= 2:
            out[key.replace("_ms", "_low_ms")] = e["low"]
            out[key.replace("_ms", "_high_ms")] = e["high"]
    return out


def sim_result(doc: Any) -> dict | None:
    """A simulation result in the schema `figures.fig_schedules` takes, or None when `doc` is not
    one. Accepts that schema itself and `kttune simulate --json` ("schema": "kttune.simulate/1":
    a list of schedules with percentiles and optional per-request samples, capacity curves)."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("schedules"), dict):
        return doc
    if str(doc.get("schema", "")).startswith("kttune.simulate/") and isinstance(doc.get("schedules"), list):
        return _from_simulate(doc)
    return None


def _from_simulate(doc: dict) -> dict:
    """`kttune simulate --json` -> the fig_schedules schema. TTFT: per-request samples when the run
    kept them, else percentiles; TBT: the per-request longest gap when sampled, else the percentiles
    of every gap; attainment: each schedule's capacity curve."""
    curves = {
        c["schedule"]: [[p["rate_per_s"], p["attainment"]] for p in c.get("curve", ())]
        for c in doc.get("capacity") or ()
    }
    scheds, sampled_gaps = {}, False
    for s in doc["schedules"]:
        samples = s.get("samples") or {}
        pct = lambda d, k=1.0: {q: d.get(f"p{q}") * k for q in ("50", "90", "99") if d and d.get(f"p{q}") is not None}  # noqa: E731
        entry = {
            "ttft_s": samples.get("ttft_s"),
            "ttft_pct_s": pct(s.get("ttft_s") or {}),
            "attainment": curves.get(s["schedule"], []),
        }
        if samples.get("max_tbt_ms"):
            entry["tbt_s"] = [v / 1e3 for v in samples["max_tbt_ms"] if v is not None]
            sampled_gaps = True
        else:
            entry["tbt_pct_s"] = pct(s.get("tbt_ms") or {}, 1e-3)
        scheds[s["schedule"]] = entry
    slo = doc.get("slo") or {}
    return {
        "schedules": scheds,
        "profile": doc.get("profile"),
        "slo": {"ttft_s": slo.get("ttft_s"), "tbt_s": (slo["tbt_ms"] / 1e3) if slo.get("tbt_ms") else None},
        "tbt_what": "longest gap per request" if sampled_gaps else "every inter-token gap",
    }


# a document's schema (kttune.schema) -> what the report makes of it; a kttune document no section
# reads (tune, validate, a listing) maps to nothing
SCHEMA_KINDS = {
    "search": "search",
    "explain": "explain",
    "profile": "profile",
    "paths": "runner",
    "runner-rows": "runner",
    "simulate": "sim",
    "schedules": "sim",
    "search-measured": "measured",
}


def classify(doc: Any) -> str | None:
    """ "profile", "search", "explain", "measured", "runner", "sim", or None for a document no
    section reads: by its `schema`, else (a document written before the envelope) by its keys."""
    kind = doc_kind(doc)
    if kind is not None:
        return SCHEMA_KINDS.get(kind[0])
    if isinstance(doc, dict) and doc.get("format") == "kttune-hardware-profile":
        return "profile"
    if isinstance(doc, dict) and "pick" in doc and "pareto" in doc:
        return "search"
    if isinstance(doc, dict) and "evaluation" in doc and "by_prompt_tokens" in doc:
        return "explain"
    if isinstance(doc, dict) and "measured_pick" in doc and "baselines" in doc:
        return "measured"
    if runner_rows(doc) is not None:
        return "runner"
    if sim_result(doc) is not None:
        return "sim"
    return None


def read_inputs(paths: list[str | os.PathLike]) -> ReportInputs:
    """Load and sort the documents. A directory stands for the *.json files in it."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.glob("*.json"))
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(
                f"{str(p)!r} does not exist", "pass JSON files written by kttune (search/explain/probe --json)"
            )
    if not files:
        raise UserError(
            "no JSON documents to report on",
            "pass files written by `kttune search --json > r.json` "
            "or `kttune probe --json`, or a directory holding them",
        )
    inp = ReportInputs()
    fix = "pass the file kttune wrote with --json (stdout only)"
    for f in files:
        doc = read_json_file(f, repr(str(f)), fix)
        with document_of(repr(str(f)), "result"):
            kind = classify(doc)
        if kind is None:
            raise UserError(
                f"{str(f)!r} is no kttune result, profile, path-runner or simulation document",
                "pass the output of `kttune search/explain/probe --json`",
            )
        with document_of(repr(str(f)), kind):
            if kind == "profile":
                from kttune.hw.profile import profile_from_dict

                profile_from_dict(doc, origin=repr(str(f)))  # the profile reader's checks, one line each
            if kind in ("search", "explain"):
                inp.results.append(doc)
            elif kind == "measured":
                inp.measured.append(doc)
            elif kind == "profile":
                inp.profiles.append(doc)
            elif kind == "runner":
                rows = runner_rows(doc) or []
                inp.runs += rows
                inp.origins.update((id(r), repr(str(f))) for r in rows)
                continue
            else:
                doc = sim_result(doc)
                inp.sims.append(doc)
            inp.origins[id(doc)] = repr(str(f))
    return inp


# ---- writing ---------------------------------------------------------------------------------------


def _write_text_atomic(path: Path, text: str) -> None:
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(text)

    replace_atomically(path, write)


def _save_figure(fig, out_dir: Path, stem: str, title: str, figures: list[FigureFile]) -> FigureFile:
    from kttune.emit.figures import provenance_of, save_png

    path = out_dir / f"{stem}.png"
    replace_atomically(path, lambda tmp: save_png(fig, tmp), suffix=".png")
    ff = FigureFile(path, title, provenance_of(fig))
    figures.append(ff)
    return ff


def _figure_md(ff: FigureFile) -> list[str]:
    return [f"![{ff.title}]({ff.path.name})", "", f"*{ff.title}.* {ff.provenance}.", ""]


def dashboard_command(storage: str) -> str:
    """The command that opens a study's storage in optuna-dashboard (a journal file path or an RDB URL,
    its password masked as everywhere kttune names a storage: kttune.search.storage_url.shown)."""
    import shlex

    from kttune.search.storage_url import shown

    return f"optuna-dashboard {shlex.quote(shown(storage))}"


def _result_section(doc: dict, k: str, out_dir: Path, runs: list[dict], figures: list[FigureFile]) -> list[str]:
    from kttune.emit import figures as F

    is_search = "pick" in doc
    ev = doc["pick"] if is_search else doc["evaluation"]
    flags, pred = ev["flags"], ev["predicted"]
    m, prof, wl = doc.get("model", {}), doc.get("profile", {}), doc.get("workload", {})
    lines = [
        f"## {'Search' if is_search else 'Explanation'}: {m.get('name')} ({m.get('method')}) on {prof.get('machine')}",
        "",
    ]
    lines += [
        f"- profile: {prof.get('machine')} ({prof.get('kind')}, fingerprint `{prof.get('fingerprint')}`, "
        f"created {prof.get('created')})",
        f"- workload: {wl.get('name')} (concurrency {wl.get('concurrency')}, decode weight {wl.get('decode_weight')})",
        f"- VRAM budget {doc['budget']['vram_bytes_per_gpu'] / GIB:.1f} GiB per GPU "
        f"(margin {doc['budget'].get('vram_margin', 0):.0%}), host RAM {doc['budget']['host_ram_bytes'] / GIB:.0f} GiB",
        f"- predicted: mean prefill {pred['mean_prefill_ms'] / 1e3:.2f} s over the workload, decode "
        f"{pred['decode_tok_s']:.1f} tok/s at batch {pred['decode_batch']}"
        + (f" ({pred['decode_tok_s_per_request']:.1f} tok/s per request)" if "decode_tok_s_per_request" in pred else "")
        + ", runtime peak "
        f"{ev['vram_bytes_per_gpu']['runtime_peak_bytes'] / GIB:.1f} GiB",
        f"- crossover of the two paths: {doc.get('crossover_tokens') or 'none'} tokens per forward",
        "",
    ]
    lines += ["| flag | value |", "|---|---|"]
    for key, flag in (
        ("num_gpu_experts", "--kt-num-gpu-experts"),
        ("chunked_prefill_size", "--chunked-prefill-size"),
        ("gpu_prefill_token_threshold", "--kt-gpu-prefill-token-threshold"),
        ("max_total_tokens", "--max-total-tokens"),
        ("cpuinfer_threads", "--kt-cpuinfer"),
        ("threadpool_count", "--kt-threadpool-count"),
    ):
        lines.append(f"| `{flag}` | {flags[key]} |")
    if flags.get("attention_backend"):
        lines.append(f"| `--attention-backend` | {flags['attention_backend']} |")
    lines.append("")
    if doc.get("command"):
        from kttune.emit.launch import launch_command

        lines += ["```bash", launch_command(doc["command"]), "```", ""]
    for r in doc.get("reasons", ()):
        lines.append(f"- {r}")
    lines.append("")
    st = doc.get("study")
    if st:
        from kttune.search.storage_url import MASK, shown

        where = shown(st["storage"])
        hidden = " (the password shows as `***`: put it in its place)" if f":{MASK}@" in where else ""
        lines += [
            f"Optuna study `{st['name']}` ({st.get('trials')} trials, {st.get('feasible')} feasible) in "
            f"`{where}`. Open it in optuna-dashboard{hidden} (objectives: mean prefill s, decode tok/s):",
            "",
            "```bash",
            dashboard_command(st["storage"]),
            "```",
            "",
        ]
    figs: list[tuple[str, str, Callable[[], Any]]] = []
    if doc.get("by_prompt_tokens"):
        figs.append(("prefill", "Prefill time and throughput against prompt length", lambda: F.fig_prefill(doc, runs)))
    figs.append(
        (
            "vram",
            "VRAM of the pick against the budget, beside the runner-ups"
            if is_search
            else "VRAM of the given flags against the budget",
            lambda: F.fig_vram(doc),
        )
    )
    if is_search:
        figs.append(("pareto", "Pareto front of the search", lambda: F.fig_pareto(doc, F.study_trials(doc))))
    for stem, title, make in figs:
        lines += _figure_md(_save_figure(make(), out_dir, f"{stem}{k}", title, figures))
    return lines


def _profile_section(doc: dict, k: str, out_dir: Path, figures: list[FigureFile]) -> list[str]:
    from kttune.emit import figures as F

    p = doc.get("provenance", {})
    cpu = doc.get("inventory", {}).get("cpu", {})
    gpus = doc.get("inventory", {}).get("gpus", [])
    lines = [
        f"## Probe: {p.get('machine')}",
        "",
        f"- {p.get('kind')} profile, fingerprint `{doc.get('fingerprint')}`, created {p.get('created')}",
        f"- CPU: {cpu.get('model')}, {cpu.get('physical_cores')} cores; GPUs: "
        + (", ".join(g.get("name", "?") for g in gpus) or "none"),
        f"- command: `{p.get('command')}`",
        "",
    ]
    kinds = {c["kind"] for c in doc.get("curves", ()) if c.get("points")}
    plan = [
        ("cpu_moe", "cpu-moe", "CPU MoE time against tokens per method and thread count", F.fig_cpu_moe),
        ("h2d", "h2d", "Host-device copy bandwidth against size", F.fig_h2d),
        ("pipeline", "pipeline", "Layerwise pipeline stages against the layer time", F.fig_pipeline),
    ]
    for kind, stem, title, fn in plan:
        if kind in kinds:
            lines += _figure_md(_save_figure(fn(doc), out_dir, f"{stem}{k}", title, figures))
    return lines


def _runner_section(inputs: ReportInputs, out: Path, figures: list[FigureFile]) -> list[str]:
    """The path runner's runs: calibration figure and error where they were predicted; a table of
    the measured times in every case."""
    from kttune.emit import figures as F

    runs = inputs.runs
    ref = inputs.results[0] if inputs.results else (inputs.profiles[0] if inputs.profiles else None)
    if ref is None and any(r.get("device") for r in runs):
        ref = {"profile": {"machine": next(r["device"] for r in runs if r.get("device"))}}
    lines = ["## Path runner against the cost model", ""]
    cal = F.calibration_error(runs)
    if cal:
        lines += [
            f"{cal['n']} runs: median |measured / predicted - 1| {cal['median_abs_rel']:.1%}, "
            f"max {cal['max_abs_rel']:.1%} (the K layers run, whole prompt)"
            + (f"; {cal['disturbed']} run(s) the runner named disturbed left out." if cal.get("disturbed") else "."),
            "",
        ]
        lines += _figure_md(
            _save_figure(
                F.fig_calibration(runs, ref), out, "calibration", "Predicted against measured prefill", figures
            )
        )
    else:
        lines += [
            f"{len(runs)} runs, none predicted (small-shape runs are not compared with the cost "
            "model), so no calibration figure.",
            "",
        ]
    lines += ["| model | path | n | prompt | chunk | measured ms | predicted ms |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        p = r.get("predicted_ms")
        lines.append(
            f"| {r.get('model') or ''} {r.get('method') or ''} | {r['path']} | {r.get('gpu_experts', '')} | "
            f"{r['tokens']} | {r.get('chunk', '')} | {r['measured_ms']:,.1f} | {'' if p is None else f'{p:,.1f}'} |"
        )
    return lines + [""]


def write_report(
    out_dir: str | os.PathLike, inputs: ReportInputs, title: str = "kttune report", save_documents: bool = False
) -> WrittenReport:
    """Write `report.md` and its PNG figures into `out_dir` (created if needed). The report is
    built in a staging directory beside it and moved in file by file once whole: a document a
    figure cannot read stops it with `out_dir` as it was. With `save_documents`, the input
    documents go beside them as JSON, so that `kttune report DIR` rebuilds the report."""
    from kttune.extras import require

    if inputs.empty():
        raise UserError(
            "nothing to report", "pass search, explain, measured search, probe, path-runner or simulation results"
        )
    require("matplotlib", "the report's figures")  # before anything is made
    out = Path(out_dir)
    base = out.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=base))
    try:
        written = _write_report_into(stage, inputs, title, save_documents)
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(stage.iterdir()):
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    moved = lambda p: out / p.name  # noqa: E731
    return WrittenReport(
        moved(written.markdown),
        tuple(replace(f, path=moved(f.path)) for f in written.figures),
        tuple(moved(d) for d in written.documents),
    )


def _write_report_into(out: Path, inputs: ReportInputs, title: str, save_documents: bool) -> WrittenReport:
    from kttune.hw.profile import write_json_atomic

    figures: list[FigureFile] = []
    docs: list[Path] = []
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    lines = [
        f"# {title}",
        "",
        f"{REPORT_MARK} {kttune_version()} at {now}. Each figure names the profile "
        "it rests on, where that profile was measured, and the calibration error.",
        "",
    ]
    origin = inputs.origins.get

    def suffix(i: int, n: int) -> str:
        return f"-{i + 1}" if n > 1 else ""

    for i, doc in enumerate(inputs.results):
        with document_of(origin(id(doc)), "result"):
            lines += _result_section(doc, suffix(i, len(inputs.results)), out, inputs.runs, figures)
    for i, doc in enumerate(inputs.measured):
        with document_of(origin(id(doc)), "measured search"):
            lines += _measured_section(doc)
    for i, doc in enumerate(inputs.profiles):
        with document_of(origin(id(doc)), "profile"):
            lines += _profile_section(doc, suffix(i, len(inputs.profiles)), out, figures)
    if inputs.runs:
        files = sorted({o for o in map(origin, map(id, inputs.runs)) if o})
        with document_of(", ".join(files) if files else None, "path-runner"):
            lines += _runner_section(inputs, out, figures)
    for i, sim in enumerate(inputs.sims):
        with document_of(origin(id(sim)), "simulation"):
            lines += _sim_section(sim, suffix(i, len(inputs.sims)), inputs, out, figures)
    if save_documents:
        named = [(f"result{suffix(i, len(inputs.results))}.json", d) for i, d in enumerate(inputs.results)]
        named += [(f"measured{suffix(i, len(inputs.measured))}.json", d) for i, d in enumerate(inputs.measured)]
        named += [(f"profile{suffix(i, len(inputs.profiles))}.json", d) for i, d in enumerate(inputs.profiles)]
        if inputs.runs:
            named.append(("runs.json", enveloped("runner-rows", {"runs": inputs.runs})))
        named += [
            (f"simulation{suffix(i, len(inputs.sims))}.json", enveloped("schedules", d))
            for i, d in enumerate(inputs.sims)
        ]
        for name, d in named:
            docs.append(write_json_atomic(out / name, d))
    md = out / "report.md"
    _write_text_atomic(md, "\n".join(lines).rstrip() + "\n")
    return WrittenReport(md, tuple(figures), tuple(docs))


def _tok_s(c: dict) -> str:
    e = c.get("estimate")
    if e and e.get("n", 1) >= 2:
        return f"{e['median']:,.0f} [{e['low']:,.0f}-{e['high']:,.0f}]"
    v = c.get("measured_tok_s")
    return "" if v is None else f"{v:,.0f}"


def _measured_section(doc: dict) -> list[str]:
    """`kttune search --measure`: the measured pick against the model's pick, its candidates and
    the baselines, with the intervals the race decided on (no figure: a table)."""
    m, prof = doc.get("model") or {}, doc.get("profile") or {}
    title = (
        f"## Measured search: {m['name']} ({m.get('method')}) on {prof.get('machine')}"
        if m.get("name")
        else "## Measured search"
    )
    lines = [
        title,
        "",
        f"- evaluator: {doc['evaluator']}; prompt lengths {', '.join(map(str, doc['prompt_tokens']))}",
        f"- decision ({doc.get('race_rounds', 0)} interleaved rounds): {doc['decision']}",
        "",
    ]
    lines += [
        "| configuration | chunk | threshold | GPU experts | threads | measured tok/s | predicted tok/s | state |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in [doc["measured_pick"], doc["model_pick"], *doc.get("model_candidates", ()), *doc["baselines"]]:
        f, p = c["config"], c.get("predicted_tok_s")
        lines.append(
            f"| {c['name']} | {f['chunked_prefill_size']} | {f['gpu_prefill_token_threshold']} | "
            f"{f['num_gpu_experts']} | {f['cpuinfer_threads']} | {_tok_s(c)} | "
            f"{'' if p is None else f'{p:,.0f}'} | {c.get('race_status') or c.get('state', '')} |"
        )
    lines.append("")
    if doc.get("command"):
        from kttune.emit.launch import launch_command

        lines += ["```bash", launch_command(doc["command"]), "```", ""]
    st = doc.get("study") or {}
    if st:
        lines += [
            f"Study `{st['name']}`: {st.get('measured_trials')} measured trials ({st.get('pruned')} stopped early), "
            f"{st.get('infeasible')} configurations over budget.",
            "",
        ]
    return lines


def _sim_section(sim: dict, k: str, inputs: ReportInputs, out: Path, figures: list[FigureFile]) -> list[str]:
    from kttune.emit import figures as F

    lines = ["## Serving simulation: prefill schedules", ""]
    for name, s in sim["schedules"].items():
        lines.append(f"- {name}: {len(s.get('ttft_s') or ())} requests, {len(s.get('attainment') or ())} arrival rates")
    lines.append("")
    return lines + _figure_md(
        _save_figure(
            F.fig_schedules(sim, inputs.results[0] if inputs.results else None),
            out,
            f"schedules{k}",
            "Schedules: TTFT, TBT, attainment",
            figures,
        )
    )
