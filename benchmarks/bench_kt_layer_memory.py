"""Resident memory of kt-kernel layers built and closed again: kt-kernel 0.7.2 never frees an
AMX-family layer's packed weights, so every build keeps its layer until the process ends. kttune keeps
a closed layer of random weights and hands it to the next layer of the same weights
(kttune.kernels.kt_spares), and runs each method's stage A writes in a process of their own
(probes/isolated.py). Three modes, each in a fresh process:

- shipped: both;
- in-process stage A: the spares, stage A in the probe's process;
- neither: stage A in the probe's process, closed layers destroyed (kttune before 2026-12-06).

Two measurements in each: per method, a random layer (32 experts, 1024 x 512) built and closed
`--builds` times, the process's resident growth at each build after the first; then `kttune probe
--quick --cpu-only --skip-host-ram` run `--probes` times in the same process (as `--repeat` and
`kttune tune` do), the process's resident size after each and the largest ended child's peak.

A third measurement, in three more fresh processes: the CPU MoE step alone of a quick probe of a
model's own layer (`--model`, BF16: Qwen3-30B-A3B's 1.1 GiB layer, one per thread count) run
`--model-probes` times in one process, with each (method, shape) whose layers pass
`ISOLATE_ABOVE_BYTES` in a process of its own (shipped), with every one in the probe's process, and
with each curve in a process of its own (what the shipped probe does where one (method, shape)'s
layers pass `child_bytes_bound`, a quarter of the available RAM: here that bound is set to 1 byte).

    python benchmarks/bench_kt_layer_memory.py                 # writes kt-layer-memory.{json,md}
    python benchmarks/bench_kt_layer_memory.py --probes 0 --model-probes 0     # the builds only
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from results_layout import results_dir

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
METHODS = ("BF16", "FP8", "FP8_PERCHANNEL", "RAWINT4", "AMXINT4", "AMXINT8")
SHAPE = dict(hidden=1024, inter=512, experts=32)


def rss() -> int:
    import psutil

    gc.collect()
    return psutil.Process().memory_info().rss


def measure_builds(builds: int) -> list[dict]:
    """In this process: per method, the resident growth of each build-and-close after the first."""
    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import load_kt_kernel
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.spec.kt_classes import kt_class_leaks

    kt = load_kt_kernel()
    rows = []
    for method in METHODS:
        host = HostExperts.random(method, SHAPE["hidden"], SHAPE["inter"], SHAPE["experts"], seed=1)
        growth, name = [], ""
        try:
            for i in range(builds):
                before = rss()
                layer = KtMoeLayer(host, top_k=8, threads=1, max_tokens=64, isa=None, kt=kt)
                name = layer.kernel_class
                layer.close()
                if i:
                    growth.append(rss() - before)
        except RuntimeError as e:
            rows.append({"method": method, "skipped": str(e)})
            continue
        rows.append(
            {
                "method": method,
                "class": name,
                "leaks": kt_class_leaks(name, kt.version),
                "host_bytes": host.nbytes,
                "growth_bytes": growth,
            }
        )
    return rows


def after_each(runs: int, run, save, record=None) -> list[dict]:
    """`run(i)` `runs` times in this process; after each, the resident size, the largest peak of an
    ended child and the run's wall time, and `record(what run returned)`'s fields where given (`save`
    gets the rows so far)."""
    import resource
    import time

    out = []
    for i in range(runs):
        t0 = time.perf_counter()
        got = run(i)
        wall = time.perf_counter() - t0
        child_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        out.append(
            {"rss_bytes": rss(), "child_peak_bytes": child_peak, "wall_s": wall, **(record(got) if record else {})}
        )
        save(out)
    return out


def measure_probes(probes: int, save=lambda rows: None) -> list[dict]:
    """In this process: after each of `probes` quick CPU probes, the resident size and the largest
    peak of an ended child (stage A's); `save` gets the rows so far after each."""
    from kttune.cli import main

    with tempfile.TemporaryDirectory() as d:

        def probe(i: int) -> None:
            argv = ["probe", "--quick", "--cpu-only", "--skip-host-ram", "--fresh", "--out", f"{d}/p{i}.json"]
            if main(argv) != 0:
                raise SystemExit("the probe failed")

        return after_each(probes, probe, save)


MODEL = "qwen3-30b-a3b"


def measure_model_probes(probes: int, save=lambda rows: None) -> list[dict]:
    """In this process: after each of `probes` CPU MoE steps of a quick probe of MODEL's own BF16
    layer, the resident size and the largest peak of an ended child."""
    from kttune import app
    from kttune.probes.run import ProbeOptions, run_probe

    opts = ProbeOptions(
        quick=True,
        model=app.model_spec(MODEL),
        methods=("BF16",),
        stage_a=False,
        host_ram=False,
        gpu=False,
        write_cache=False,
        merge_cached=False,
    )
    return after_each(probes, lambda i: run_probe(opts), save)


# stage A in the probe's process: run_isolated replaced by a plain call
IN_PROCESS = (
    "import kttune.probes.run as r; r.run_isolated = lambda fn, *a, reporter, **k: fn(*a, reporter=reporter, **k);"
)
MODES = {
    "shipped": "",
    "in_process_stage_a": IN_PROCESS,
    "neither": IN_PROCESS + "from kttune.kernels import kt_spares; kt_spares.keeping = False;",
}


# the CPU MoE step of a model's layer: every (method, shape) in the probe's process, or as shipped
MODEL_MODES = {
    "shipped": "",
    "in_process_cpu_moe": "import kttune.probes.run as r; r.ISOLATE_ABOVE_BYTES = 1 << 62;",
    "a_curve_to_a_process": "import kttune.probes.run as r; r.child_bytes_bound = lambda: 1;",
}


def child(mode: str, builds: int, probes: int) -> dict:
    """One mode in a fresh process (the leak is the process's)."""
    return fresh(
        MODES[mode]
        + f"r = {{'builds': b.measure_builds({builds}), 'probes': []}}; save(r);"
        + f"b.measure_probes({probes}, lambda rows: save({{**r, 'probes': rows}}))",
        mode,
    )


def model_child(mode: str, probes: int) -> dict:
    return fresh(
        MODEL_MODES[mode] + f"b.measure_model_probes({probes}, lambda rows: save({{'probes': rows}}))",
        mode,
        {"probes": []},
    )


def fresh(body: str, mode: str, empty: dict | None = None, key: str = "probes", what: str = "probe") -> dict:
    """`body` in a fresh process, with `save` (results so far, to a file written after each
    measurement, so that a process the system kills, out of memory, leaves what it had) and this
    module as `b`; where it ends early, `ended` names the `what` of `key`'s rows it was in."""
    with tempfile.TemporaryDirectory() as d:
        res = Path(d) / "r.json"
        if empty is not None:
            res.write_text(json.dumps(empty))
        code = (
            "import json, sys; sys.path.insert(0, 'benchmarks'); import bench_kt_layer_memory as b;"
            + f"save = lambda r: open({str(res)!r}, 'w').write(json.dumps(r));"
            + body
        )
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
        if not res.is_file():
            raise SystemExit(f"{mode}: the child failed ({proc.returncode}): {proc.stderr[-2000:]}")
        out = json.loads(res.read_text())
        if proc.returncode:
            killed = proc.returncode < 0
            out["ended"] = (
                f"killed by signal {-proc.returncode} during {what} {len(out[key]) + 1}"
                + (" (the system was out of memory)" if proc.returncode == -9 else "")
                if killed
                else f"failed (exit code {proc.returncode}) during {what} {len(out[key]) + 1}"
            )
        return out


def _mib(b: float) -> str:
    return f"{b / MIB:,.0f}"


def _cell(r: dict) -> str:
    if "skipped" in r:
        return "not built here"
    g = r["growth_bytes"]
    return f"{_mib(statistics.median(g))} [{_mib(min(g))}-{_mib(max(g))}]" if g else "-"


def table(res: dict) -> str:
    modes = list(MODES)
    lines = [
        "| method | class | kt-kernel frees it | layer MiB | growth per build, MiB, median [min-max]: "
        + " | ".join(modes)
        + " |",
        "|---|---|---|---|" + "---|" * len(modes),
    ]
    rows = {m: {r["method"]: r for r in res[m]["builds"]} for m in modes}
    for method in METHODS:
        a = rows["shipped"][method]
        if "skipped" in a:
            lines.append(f"| {method} | not built here: {a['skipped']} |" + " |" * (2 + len(modes)))
            continue
        cells = " | ".join(_cell(rows[m][method]) for m in modes)
        lines.append(
            f"| {method} | {a['class']} | {'no' if a['leaks'] else 'yes'} | {_mib(a['host_bytes'])} | {cells} |"
        )
    lines += _probe_rows(res, modes, "quick CPU probe in one process")
    lines += _probe_rows(
        res["model_probes"], list(MODEL_MODES), f"CPU MoE step of a quick `--model {MODEL}` BF16 probe in one process"
    )
    return "\n".join(lines) + "\n"


def _probe_rows(res: dict, modes: list[str], what: str) -> list[str]:
    """A table of the probes run one after another in each mode's process (none: no lines)."""
    n = max(len(res[m]["probes"]) for m in modes)
    if not n:
        return []
    lines = [
        "",
        f"| {what} | " + " | ".join(f"{m}: resident MiB after it (largest child's peak), wall s" for m in modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    for i in range(n):
        cells = []
        for m in modes:
            ps = res[m]["probes"]
            if i < len(ps):
                p = ps[i]
                cells.append(f"{_mib(p['rss_bytes'])} ({_mib(p['child_peak_bytes'])}), {p['wall_s']:.0f}")
            else:
                cells.append(res[m].get("ended", "-") if i == len(ps) else "")
        lines.append(f"| probe {i + 1} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--builds", type=int, default=5)
    ap.add_argument("--probes", type=int, default=3)
    ap.add_argument("--model-probes", type=int, default=2)
    ap.add_argument("--out", help="folder for the results (default: benchmarks/results/<today>-<this machine>/)")
    a = ap.parse_args()
    from kttune.kernels.kt_ext import load_kt_kernel

    kt = load_kt_kernel()
    if kt is None:
        raise SystemExit("needs kt-kernel (bash scripts/setup.sh)")
    res = {
        "kt_kernel": {"version": kt.version, "variant": kt.variant},
        "shape": SHAPE,
        **{m: child(m, a.builds, a.probes) for m in MODES},
        "model": MODEL,
        "model_probes": {m: model_child(m, a.model_probes) for m in MODEL_MODES},
    }
    out = Path(a.out) if a.out else results_dir()
    out.mkdir(parents=True, exist_ok=True)
    import psutil

    from kttune.probes.inventory import collect_cpu

    cpu = collect_cpu()
    res["host"] = {
        "cpu": cpu.model,
        "cores": cpu.physical_cores,
        "ram_bytes": psutil.virtual_memory().total,
        "last_level_cache_bytes": cpu.last_level_cache_bytes,
    }
    (out / "kt-layer-memory.json").write_text(json.dumps(res, indent=1) + "\n")
    llc = f"{cpu.last_level_cache_bytes / MIB:.0f} MiB" if cpu.last_level_cache_bytes else "unknown"
    md = (
        f"# kt-kernel layers built and closed again: resident memory\n\n"
        f"kt-kernel {kt.version} ({kt.variant} build) on {cpu.model}, {cpu.physical_cores} cores, "
        f"{psutil.virtual_memory().total / 2**30:.1f} GiB RAM, last-level cache {llc}; "
        f"`python benchmarks/bench_kt_layer_memory.py --builds {a.builds} --probes {a.probes} "
        f"--model-probes {a.model_probes}`; "
        f"each mode in a fresh process.\n\n" + table(res)
    )
    (out / "kt-layer-memory.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
