"""The report of `kttune tune`: the verification table (the pick against its runners-up and the
baselines, each with its measured interval and its ratio to the pick), the gains, the crossover,
the output check, the launch command; as rich tables for the terminal (80 and 60 columns) and as
Markdown + JSON files (`write_report`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kttune.emit.terminal import first_that_fits, keep_title

ROLE_ORDER = {"pick": 0, "runner-up": 1, "baseline": 2, "candidate": 3}


def _k(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _flags(c: dict) -> str:
    return f"{_k(c['chunked_prefill_size'])}/{_k(c['gpu_prefill_token_threshold'])}/{c['num_gpu_experts']}/{c['cpuinfer_threads']}"


def _tok(e: dict | None) -> str:
    return "-" if not e else f"{e['median']:,.0f}"


def _pm(e: dict | None) -> str:
    if not e or e.get("n", 1) < 2:
        return "" if not e else "n=1"
    half = (e["high"] - e["low"]) / 2 / e["median"] if e["median"] else 0.0
    return f"±{100 * half:.0f}%" + (f"*{len(e['outliers'])}" if e.get("outliers") else "")


def _ratio(c: dict | None) -> str:
    if not c:
        return ""
    if c["low"] == c["high"]:
        return f"{c['ratio']:.2f}"
    return f"{c['ratio']:.2f} [{c['low']:.2f}-{c['high']:.2f}]"


def sorted_rows(doc: dict) -> list[dict]:
    rows = list(doc.get("verification", []))
    return sorted(
        rows, key=lambda r: (ROLE_ORDER.get(r["role"], 9), -((r.get("measured_tok_s") or {}).get("median") or 0))
    )


def _table(doc: dict, compact: bool):
    from rich import box
    from rich.table import Table

    t = Table(
        title="verification: measured prefill tok/s",
        show_edge=False,
        box=box.SIMPLE_HEAD,
        caption="flags: chunk/threshold/GPU experts/cpuinfer\n± half the interval, *k outliers left out\n"
        "vs pick: ratio [interval], paired by round",
    )
    cols = ["configuration", "flags", "tok/s", "±", "vs pick"] + ([] if compact else ["status"])
    for h in cols:
        t.add_column(h, justify="left" if h in ("configuration", "flags", "status") else "right", no_wrap=True)
    for r in sorted_rows(doc):
        name = r["name"] if len(r["name"]) <= 20 or not compact else r["name"][:19] + "…"
        cells = [
            ("* " if r["role"] == "pick" else "") + name,
            _flags(r["config"]),
            _tok(r.get("measured_tok_s")),
            _pm(r.get("measured_tok_s")),
            _ratio(r.get("vs_pick")),
        ]
        if not compact:
            cells.append(r["status"] if r["fits"] else "does not fit")
        t.add_row(*cells)
    return keep_title(t)


def _narrow_table(doc: dict):
    """The 60-column form: one row per configuration, no flags (they are in the JSON and Markdown)."""
    from rich import box
    from rich.table import Table

    t = Table(
        title="verification (tok/s, vs pick)",
        show_edge=False,
        box=box.SIMPLE_HEAD,
        caption="ratio to the pick [interval]",
    )
    for h in ("configuration", "tok/s", "vs pick"):
        t.add_column(h, justify="left" if h == "configuration" else "right", no_wrap=True)
    for r in sorted_rows(doc):
        name = r["name"] if len(r["name"]) <= 20 else r["name"][:19] + "…"
        t.add_row(
            ("* " if r["role"] == "pick" else "") + name,
            _tok(r.get("measured_tok_s")) + " " + _pm(r.get("measured_tok_s")),
            _ratio(r.get("vs_pick")),
        )
    return keep_title(t)


def summary_lines(doc: dict) -> list[str]:
    out = []
    pick = doc["pick"]
    e = doc.get("pick_measured_tok_s")
    if doc["mode"] == "model":
        out.append(
            f"pick (cost model, not measured): {_flags(pick)}; predicted {doc.get('pick_predicted_tok_s') or 0:,.0f} tok/s"
        )
    else:
        out.append(
            f"pick: {_flags(pick)} (chunk/threshold/GPU experts/cpuinfer), measured "
            + (f"{e['median']:,.0f} tok/s [{e['low']:,.0f}-{e['high']:,.0f}]" if e else "-")
        )
    out.append(f"decision: {doc['decision']}")
    line = profile_line(doc.get("probe") or {})
    if line:
        out.append(line)
    for g in doc.get("gains", []):
        out.append(f"gain over {g['baseline']}: {g['ratio']:.2f}x [{g['low']:.2f}-{g['high']:.2f}]")
    c = (doc.get("crossover") or {}).get("measured")
    if c:
        if c.get("x"):
            out.append(
                f"crossover (n={doc['crossover']['gpu_experts']}): {c['x']:,.0f} tokens [{c['low']:,.0f}-{c['high']:,.0f}] "
                f"measured; the model said {doc['crossover'].get('predicted_raw')}, calibrated "
                f"{doc['crossover'].get('predicted_calibrated')}"
            )
        else:
            out.append(f"crossover: not in the measured sizes (layerwise/hybrid ratio {c.get('side')} 1 throughout)")
    chk = doc.get("output_check") or {}
    if chk.get("checked"):
        out.append(
            f"output check at {chk['tokens']} tokens: hybrid vs layerwise differ by {100 * chk['moe_rel_diff']:.2f}% "
            f"(MoE) and {100 * chk['layers_rel_diff']:.2f}% (layers), tolerance {100 * chk['tolerance']:.0f}%: "
            + ("agree" if chk.get("agree") else "DISAGREE")
        )
    elif chk:
        out.append(f"output check: {chk.get('reason', 'not run')}")
    if doc.get("phases_s"):
        out.append(
            f"took {doc['wall_s']:.0f} s ("
            + ", ".join(f"{k} {v:.0f} s" for k, v in doc["phases_s"].items() if v >= 0.5)
            + ")"
        )
    if doc.get("resumed"):
        out.append(f"resumed from {doc['state_path']}")
    return out


def profile_line(probe: dict) -> str:
    """What tune's profile step did (`TuneResult.probe`): the profile reused or probed, and the
    model's attention block where tune timed it; "" when there is nothing to say."""
    action = probe.get("action")
    if not action:
        return ""
    if action == "given":
        text = f"profile: {probe.get('profile')} (given; nothing probed)"
    elif action == "probed":
        text = (
            f"profile: probed here ({probe.get('why')}): {probe.get('curves')} curves at "
            f"{', '.join(map(str, probe.get('threads', [])))} threads in {probe.get('seconds', 0):.0f} s"
        )
    else:
        text = f"profile: {action} ({probe.get('why')})"
    block = probe.get("attention_block")
    if block:
        text += (
            f"; attention block of {block['model']} timed on this GPU in {block['seconds']:.1f} s, into {block['into']}"
            if block.get("curves")
            else f"; attention block of {block['model']} not timed: " + "; ".join(block.get("notes") or ["no curve"])
        )
    return text


def render(console: Any, doc: dict) -> None:
    """`doc`: TuneResult.to_dict()."""
    from kttune.emit.launch import launch_command
    from kttune.emit.report import render_notes

    if doc.get("verification"):
        console.print(
            first_that_fits(
                console.width, lambda: _table(doc, False), lambda: _table(doc, True), lambda: _narrow_table(doc)
            )
        )
    for line in summary_lines(doc):
        console.print(line, markup=False, highlight=False)
    render_notes(console, doc.get("notes", ()))
    console.print("[bold]sglang-kt launch command[/]")
    console.print(launch_command(doc["command"]), soft_wrap=True, markup=False)


def markdown(doc: dict) -> str:
    from kttune.emit.launch import launch_command

    lines = [
        f"# kttune tune: {doc['model']} {doc['method']}",
        "",
        f"Mode: {doc['mode']} (evaluator {doc['evaluator']}); profile: {doc['profile']}; prompt lengths measured: "
        f"{', '.join(map(str, doc.get('prompt_tokens', [])))}.",
        "",
    ]
    if doc.get("verification"):
        lines += [
            "| configuration | role | chunk | threshold | GPU experts | cpuinfer | tok/s median | interval | n | outliers | "
            "vs pick | status |",
            "|---|---|---:|---:|---:|---:|---:|---|---:|---|---|---|",
        ]
        for r in sorted_rows(doc):
            c, e = r["config"], r.get("measured_tok_s") or {}
            iv = f"{e['low']:,.0f}-{e['high']:,.0f}" if e and e.get("n", 1) >= 2 else ""
            outs = "; ".join(o["reason"] for o in e.get("outliers", [])) if e else ""
            lines.append(
                f"| {r['name']} | {r['role']} | {c['chunked_prefill_size']} | {c['gpu_prefill_token_threshold']} | "
                f"{c['num_gpu_experts']} | {c['cpuinfer_threads']} | {_tok(e or None)} | {iv} | {e.get('n', '') if e else ''} | "
                f"{outs} | {_ratio(r.get('vs_pick'))} | {r['status'] if r['fits'] else 'does not fit'} |"
            )
        lines.append("")
    lines += [f"- {x}" for x in summary_lines(doc)]
    lines += [f"- note: {n}" for n in doc.get("notes", [])]
    lines += ["", "```", launch_command(doc["command"]), "```", ""]
    return "\n".join(lines)


def write_report(doc: dict, folder: str | Path) -> list[Path]:
    """tune.json and tune.md in `folder` (each written whole)."""
    from kttune.paths import replace_atomically

    d = Path(folder)
    out = []
    for name, text in (("tune.json", json.dumps(doc, indent=1, default=str)), ("tune.md", markdown(doc))):
        out.append(replace_atomically(d / name, lambda tmp, t=text: Path(tmp).write_text(t)))
    return out
