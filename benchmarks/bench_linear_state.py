"""What SGLang starts with from kttune's launch command for a model with linear-attention layers,
with and without the state slots sized on the command (docs/memory.md#linear-attention-state).

For each VRAM budget and GPU count, `kttune search` picks the flags for Qwen3-Next-80B-A3B on the
shipped H200 profile (seed 1); the command it prints is then read back as SGLang sizes it at start
(kttune.search.launch_command, SGLang's own rules): the KV pool and the requests it runs at once,
against the `--max-total-tokens` and `--max-running-requests` the search planned. "Before" is the
same pick launched as kttune did until 2026-12-05: no `--max-mamba-cache-size`, and a
`--mem-fraction-static` sized without the states. Computed from SGLang's sizing rules, not measured
on a server (sglang does not install on the measured box).

    python3 benchmarks/bench_linear_state.py --out benchmarks/results/2026-12-05-computed/linear-state
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from results_layout import write_result

from kttune.config import LaunchConfig
from kttune.memory.vram import mem_fraction_static, vram_breakdown
from kttune.search.launch_command import resolve_launch
from kttune.search.workload import load_workload
from kttune.spec.launch_args import flag_name, parse_launch_command
from kttune.spec.loader import load_model
from kttune.units import GIB

MODEL = "qwen3-next-80b-a3b"
PROFILE = "h200-pcie5-xeon-amx-16c"


def pick(vram_gib: int, gpus: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "kttune.cli", "search", "--model", MODEL, "--vram", f"{vram_gib}G", "--gpus", str(gpus)]
        + ["--profile", PROFILE, "--host-ram", "512G", "--seed", "1", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def without_state_flag(argv: list[str], mfs: float) -> list[str]:
    """The command as kttune printed it before: no state slots, the fraction sized without them."""
    out, skip = [], 0
    for w in argv:
        if skip:
            skip -= 1
            continue
        if w == flag_name("linear_state_slots"):
            skip = 1
            continue
        out.append(w)
    i = out.index(flag_name("mem_fraction_static"))
    out[i + 1] = f"{mfs:g}"
    return out


def started(argv: list[str], vram_gib: int) -> dict:
    parsed = parse_launch_command(argv)
    r = resolve_launch(parsed, load_model(MODEL), "BF16", vram_gib * GIB, load_workload("rag"), (15,), 16, 1)
    return {
        "kv_tokens": r.cfg.max_total_tokens,
        "running_requests": r.cfg.max_running_requests,
        "state_slots": r.cfg.linear_state_slots,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = ap.parse_args()
    model = load_model(MODEL)
    rows = []
    for gpus in (1, 2):
        for gib in (24, 32, 48, 80):
            doc = pick(gib, gpus)
            flags = doc["pick"]["flags"]
            argv = doc["command"]["argv"] if isinstance(doc["command"], dict) else doc["command"]
            cfg = LaunchConfig(**flags)
            b = vram_breakdown(model, cfg)
            old_mfs = mem_fraction_static(replace(b, linear_state=0), gib * GIB)  # sized without the states
            rows.append(
                {
                    "gpus": gpus,
                    "vram_gib": gib,
                    "planned": {
                        "kv_tokens": flags["max_total_tokens"],
                        "running_requests": flags["max_running_requests"],
                        "state_slots": flags["linear_state_slots"],
                        "state_gib": b.linear_state / GIB,
                    },
                    "now": started(list(argv), gib),
                    "before": started(without_state_flag(list(argv), old_mfs), gib),
                }
            )
    lines = [
        "# Qwen3-Next-80B-A3B: what SGLang starts with from kttune's command",
        "",
        f"`kttune search --model {MODEL} --vram V --gpus G --profile {PROFILE} --seed 1`; the printed command read "
        "back with SGLang's sizing rules (kttune.search.launch_command). Before: the same pick without "
        "`--max-mamba-cache-size` and with the fraction sized without the states (kttune until 2026-12-05). "
        "Computed, not measured on a server.",
        "",
        "| GPUs | VRAM | planned KV tokens / running | state slots (GiB) | now: KV tokens / running | "
        "before: state slots, KV tokens (of planned) / running |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        p, n, o = r["planned"], r["now"], r["before"]
        lines.append(
            f"| {r['gpus']} | {r['vram_gib']} GiB | {p['kv_tokens']:,} / {p['running_requests']} | "
            f"{p['state_slots']} ({p['state_gib']:.2f}) | {n['kv_tokens']:,} / {n['running_requests']} | "
            f"{o['state_slots']}, {o['kv_tokens']:,} ({o['kv_tokens'] / p['kv_tokens']:.0%}) / {o['running_requests']} |"
        )
    write_result(args.out, {"model": MODEL, "profile": PROFILE, "rows": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
