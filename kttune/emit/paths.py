"""Rendering of path-runner results (the dict of `kttune.runner.api.PathsResult.to_dict`):
a rich table for the terminal and a Markdown table for results files."""

from __future__ import annotations

from typing import Any


def _ms(x: Any) -> str:
    return "" if x is None else f"{x:,.1f}"


def _pct(x: Any) -> str:
    return "" if x is None else f"{100 * x:.0f}%"


def _gib(x: Any) -> str:
    return "" if not x else f"{x / 2**30:.2f}"


def spread(r: dict) -> str:
    """The run's repeats as '±x%' (half the interval over the median), with '*k' for k outliers
    left out; '' for a single run."""
    e = (r.get("timing") or {}).get("measured_ms")
    if not e or e.get("n", 1) < 2:
        return ""
    half = (e["high"] - e["low"]) / 2 / e["median"] if e["median"] else 0.0
    out = f"±{100 * half:.0f}%" if half >= 0.005 else "±0%"
    return out + (f"*{len(e['outliers'])}" if e.get("outliers") else "")


def run_rows(result: dict) -> list[list[str]]:
    rows = []
    for r in result["runs"]:
        pred = r.get("prediction", {})
        mem = pred.get("memory", {}).get("total")
        paths = ",".join(sorted(set(f["path"] for f in r["forwards"])))
        p = pred.get("predicted_ms")
        err = abs(p - r["measured_ms"]) / r["measured_ms"] if p and r["measured_ms"] else None
        rows.append(
            [
                r["model"],
                r["method"],
                str(r["gpu_experts"]),
                str(r["prompt_tokens"]),
                str(r["chunk"]),
                str(r["threshold"]),
                r.get("forced_path") or "switch",
                paths,
                str(len(r["forwards"])),
                _ms(r["measured_ms"]),
                spread(r),
                _ms(p),
                _pct(err),
                _ms(r["extrapolated_ms"]),
                _gib(r["peak_allocated_bytes"]),
                _gib(r["peak_reserved_bytes"]),
                _gib(mem),
            ]
        )
    return rows


HEADERS = [
    "model",
    "method",
    "n",
    "L",
    "chunk",
    "thr",
    "mode",
    "paths",
    "fwd",
    "K-layer ms",
    "±",
    "pred ms",
    "err",
    "full-model ms",
    "peak GiB",
    "reserved GiB",
    "mem model GiB",
]


def summary_lines(result: dict) -> list[str]:
    s = result.get("summary") or {}
    out = []
    for path, e in (s.get("errors") or {}).items():
        if path == "entries":
            continue
        out.append(
            f"{path}: {e['points']} forwards, MAPE raw {_pct(e['mape_raw'])}, calibrated (held out) {_pct(e['mape_calibrated_held_out'])}"
        )
    for n, c in (s.get("crossover") or {}).items():
        iv = c.get("measured_interval") or {}
        band = (
            f" [{iv['low']:.0f}-{iv['high']:.0f}]" if iv.get("low") is not None and iv.get("high") is not None else ""
        )
        line = f"crossover n={n}: measured {c['measured']}{band}, predicted {c['predicted']}" + (
            f" (error {_pct(c['error'])})" if c.get("error") is not None else ""
        )
        if "predicted_calibrated" in c:
            line += f", calibrated on the switch runs {c['predicted_calibrated']}" + (
                f" (error {_pct(c['error_calibrated'])})" if c.get("error_calibrated") is not None else ""
            )
        if c.get("calibration_points_other_n"):
            line += f", calibrated on the other GPU-expert counts' runs {c['predicted_calibrated_other_n']}" + (
                f" (error {_pct(c['error_calibrated_other_n'])})"
                if c.get("error_calibrated_other_n") is not None
                else ""
            )
        out.append(line)
    out += [f"disturbed: {line}" for line in s.get("disturbed", [])]
    for sk in result.get("skipped", []):
        out.append(
            f"skipped L={sk['prompt']} chunk={sk['chunk']} n={sk['gpu_experts']} {sk.get('force') or ''}: {sk['reason']}"
        )
    return out + list(result.get("notes", []))


def markdown(result: dict, title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines.append("| " + " | ".join(HEADERS) + " |")
    lines.append("|" + "---|" * len(HEADERS))
    for row in run_rows(result):
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines += [f"- {x}" for x in summary_lines(result)]
    return "\n".join(lines) + "\n"


def _full_table(result: dict):
    from rich.table import Table

    t = Table(title="path runner")
    for h in HEADERS:
        t.add_column(h, justify="right" if h not in ("model", "method", "mode", "paths") else "left", no_wrap=True)
    for row in run_rows(result):
        t.add_row(*row)
    return t


def _forwards_short(r: dict) -> str:
    """The forwards a run made, counted per path: '3L+1H' (L layerwise, H hybrid), in run order."""
    out: list[list] = []
    for f in r["forwards"]:
        k = f["path"][:1].upper()
        if out and out[-1][1] == k:
            out[-1][0] += 1
        else:
            out.append([1, k])
    return "+".join(f"{n}{k}" for n, k in out)


def _k(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def _compact_table(result: dict, narrow: bool = False):
    """The 80-column form: model and method in the title, times in short units, the memory model
    and reserved bytes left to the JSON. `narrow` (60 columns): the measured K-layer time over the
    predicted one in one cell, in the tight frame."""
    from rich import box
    from rich.table import Table

    from kttune.emit.terminal import keep_title, ms_short, tight_table, tokens_short

    runs = result["runs"]
    names = sorted({f"{r['model']} {r['method']}" for r in runs})
    title = f"path runner: {', '.join(names)}" if len(names) == 1 else "path runner"
    spread_note = "±: half the repeats' interval, *k: outliers left out" if any(spread(r) for r in runs) else ""
    if narrow:
        t = tight_table(
            title,
            "mode: one path forced, or the switch at threshold\nthr; L layerwise, H hybrid"
            + (f"\n{spread_note}" if spread_note else ""),
        )
    else:
        t = Table(
            title=title,
            show_edge=False,
            caption="mode: one path forced, or the switch at threshold thr; "
            "L layerwise, H hybrid" + (f"\n{spread_note}" if spread_note else ""),
            box=box.SIMPLE_HEAD,
        )
    timing = ["K-layer\npred"] if narrow else ["K-layer", "pred"]
    cols = (["model"] if len(names) > 1 else []) + [
        "n",
        "L",
        "chunk",
        "mode",
        "fwd",
        *timing,
        "err",
        "full\nmodel",
        "peak\nGiB",
    ]
    for h in cols:
        t.add_column(h, justify="left" if h in ("model", "mode", "fwd") else "right", no_wrap=True)
    for r in runs:
        pred = (r.get("prediction") or {}).get("predicted_ms")
        err = abs(pred - r["measured_ms"]) / r["measured_ms"] if pred and r["measured_ms"] else None
        mode = f"{r['forced_path'][:1].upper()} only" if r.get("forced_path") else f"thr {_k(r['threshold'])}"
        times = [ms_short(r["measured_ms"]), ms_short(pred) if pred else ""]
        cells = [
            str(r["gpu_experts"]),
            tokens_short(r["prompt_tokens"]),
            tokens_short(r["chunk"]),
            mode,
            _forwards_short(r),
            *(
                [f"{times[0]} {spread(r)}".rstrip() + f"\n{times[1]}"]
                if narrow
                else [times[0] + (f"\n{spread(r)}" if spread(r) else ""), times[1]]
            ),
            _pct(err),
            ms_short(r["extrapolated_ms"]),
            _gib(r["peak_allocated_bytes"]),
        ]
        t.add_row(*(([f"{r['model']} {r['method']}"] if len(names) > 1 else []) + cells))
    return keep_title(t)


def render(result: dict, console: Any) -> None:
    from kttune.emit.terminal import first_that_fits

    if result["runs"]:
        console.print(
            first_that_fits(
                console.width,
                lambda: _full_table(result),
                lambda: _compact_table(result),
                lambda: _compact_table(result, narrow=True),
            )
        )
    for line in summary_lines(result):
        console.print(line)
