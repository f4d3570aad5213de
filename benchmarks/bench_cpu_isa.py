"""CPU derivation across ISA classes, held out: kt-kernel's AVX2 and AVX-512 builds measured on this
host against the profile `kttune.hw.derive` makes for this host from the measured AMX box.

Each kt-kernel build runs in its own process (`KT_KERNEL_CPU_VARIANT`), one MoE layer at the quick
probe's shape (H1024 I512 E32 top-8, the shape the H200 box's profile holds too) on `--threads`
workers, forwards of 1-64 tokens (`--tokens`), `--repeats` timed calls after a warm-up, rounds of the builds
interleaved so the host's other load falls on each alike. A loaded host inflates the median (calls
land on scheduler time slices of 4-8 ms), so the table keeps the 10th percentile beside it.

The prediction: profiles/h200-pcie5-xeon-amx-16c.json derived to this host's cores and ISA class
(`CpuTarget(cores, isa)`), at the same worker count. Writes cpu-isa-<tag>.json (with every sample)
and .md to --out.

    python benchmarks/bench_cpu_isa.py [--builds avx2,avx512_bf16] [--threads 1] [--rounds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from results_layout import results_dir

SHAPE = dict(hidden=1024, inter=512, experts=32, top_k=8)
TOKENS = (1, 4, 16, 64)
METHODS = ("BF16", "FP8", "RAWINT4")
SOURCE = "h200-pcie5-xeon-amx-16c"


def measure_build(threads: int, repeats: int, tokens: tuple[int, ...] = TOKENS, shape: dict = SHAPE) -> dict:
    """In this process (its kt-kernel build fixed by the environment): every method's layer timed at
    `tokens`. {method: {tokens: [ms, ...]}} and the build's name."""
    import time

    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import load_kt_kernel, quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.probes.cpu_moe import _inputs
    from kttune.probes.inventory import collect_cpu
    from kttune.spec.moe_shape import MoeLayerShape

    kt = load_kt_kernel()
    isa = collect_cpu().isa
    shape = MoeLayerShape(**shape)
    out: dict = {"variant": kt.variant, "methods": {}}
    for method in METHODS:
        try:
            with quiet_stdout(to_stderr=True):
                layer = KtMoeLayer(
                    HostExperts.random(method, shape.hidden, shape.inter, shape.experts),
                    top_k=shape.top_k,
                    threads=threads,
                    max_tokens=max(tokens),
                    isa=isa,
                    kt=kt,
                )
        except Exception as e:  # noqa: BLE001 - a build without the method says so
            out["methods"][method] = {"error": f"{type(e).__name__}: {e}"}
            continue
        res = {"kernel": layer.kernel_class}
        try:
            for n in tokens:
                x, ids, w, o = _inputs(n, shape, 0)
                for _ in range(3):
                    layer.forward(x, ids, w, o)
                ts = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    layer.forward(x, ids, w, o)
                    ts.append((time.perf_counter() - t0) * 1e3)
                res[str(n)] = ts
        finally:
            layer.close()
        out["methods"][method] = res
    return out


def run_child(build: str, threads: int, repeats: int, tokens: tuple[int, ...] = TOKENS, shape: dict = SHAPE) -> dict:
    """One build's measurements in a fresh process (kt-kernel loads one build per process)."""
    import tempfile

    env = {**os.environ, "KT_KERNEL_CPU_VARIANT": build}
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "out.json"
        cmd = [sys.executable, __file__, "--child", str(dest), "--threads", str(threads), "--repeats", str(repeats)]
        cmd += ["--tokens", ",".join(map(str, tokens)), "--shape", _shape_arg(shape)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if p.returncode or not dest.is_file():
            return {"error": p.stderr[-2000:]}
        return json.loads(dest.read_text())


def summarize(
    rounds: dict[str, list[dict]], threads: int, tokens: tuple[int, ...] = TOKENS, shape: dict = SHAPE
) -> dict:
    """Per build, method and token count: pooled samples' p10 and median, and the derived prediction."""
    import statistics

    from kttune.hw.derive import Change, CpuTarget, derive_profile, isa_class
    from kttune.hw.registry import load_shipped
    from kttune.probes.inventory import collect_cpu, host_line, usable_cores

    cpu = collect_cpu()
    cores = usable_cores(cpu)
    src = load_shipped(SOURCE)
    rows = []
    for build, runs in rounds.items():
        variant = next((r.get("variant") for r in runs if "variant" in r), build)
        cls = "avx2" if variant == "avx2" else "avx512" if variant.startswith("avx512") else "amx"
        isa = {
            "avx2": ("avx2", "fma"),
            "avx512": ("avx2", "avx512_bf16", "avx512_vnni", "avx512bw", "avx512f", "fma"),
        }.get(cls, cpu.isa)
        target = CpuTarget(cores=cores, isa=isa, vendor=cpu.vendor or None)
        derived = derive_profile(src, Change(cpu=target)).profile
        for method in METHODS:
            samples: dict[int, list[float]] = {}
            for r in runs:
                m = r.get("methods", {}).get(method, {})
                for n in tokens:
                    samples.setdefault(n, []).extend(m.get(str(n), []))
            pred = {}
            for c in derived.curves_of("cpu_moe", method=method, threads=threads, **shape):
                pred = {int(p.x): p.t_ms for p in c.points}
            for n in tokens:
                s = sorted(samples.get(n, []))
                if not s:
                    continue
                p10 = s[max(0, len(s) // 10)]
                med = statistics.median(s)
                rows.append(
                    {
                        "build": variant,
                        "isa_class": cls,
                        "method": method,
                        "tokens": n,
                        "samples": len(s),
                        "p10_ms": p10,
                        "median_ms": med,
                        "predicted_ms": pred.get(n),
                        "ratio_p10": pred[n] / p10 if n in pred else None,
                        "label": next(
                            (c.params["label"] for c in derived.curves_of("cpu_moe", method=method, threads=threads)),
                            None,
                        ),
                        "expected_error": next(
                            (
                                c.params["expected_error"]
                                for c in derived.curves_of("cpu_moe", method=method, threads=threads)
                            ),
                            None,
                        ),
                    }
                )
    return {
        "host": host_line(),
        "cores": cores,
        "threads": threads,
        "source": SOURCE,
        "shape": shape,
        "isa_class_of_host": isa_class(cpu.isa),
        "rows": rows,
    }


def _shape_arg(shape: dict) -> str:
    return ",".join(str(shape[k]) for k in ("hidden", "inter", "experts", "top_k"))


def markdown(d: dict) -> str:
    lines = [
        "# kt-kernel builds on this host against the profile derived from the AMX box",
        "",
        f"Host: {d['host']} ({d['cores']} usable cores); {d['threads']} worker thread(s); shape H{d['shape']['hidden']} "
        f"I{d['shape']['inter']} E{d['shape']['experts']} top-{d['shape']['top_k']}. Predicted: `{d['source']}` derived "
        "to this host's cores and the build's ISA class. Measured: 10th percentile and median of the pooled rounds"
        + (f" ({d['note']})" if d.get("note") else "")
        + ".",
        "",
        "| build | method | tokens | measured p10 ms | median ms | predicted ms | predicted / p10 | label (stated error) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        ratio = f"{r['ratio_p10']:.2f}" if r["ratio_p10"] else "n/a"
        pred = f"{r['predicted_ms']:.3f}" if r["predicted_ms"] else "n/a"
        err = r.get("expected_error")
        label = f"{r.get('label')} ({err:g}x)" if err else str(r.get("label"))
        lines.append(
            f"| {r['build']} | {r['method']} | {r['tokens']} | {r['p10_ms']:.3f} | {r['median_ms']:.3f} | {pred} | "
            f"{ratio} | {label} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", default="avx2,avx512_bf16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--out",
        help="folder for the results (default: benchmarks/results/<today>-<this machine>/, benchmarks/results_layout.py)",
    )
    ap.add_argument("--tag", default="", help="a suffix for the file names (cpu-isa-TAG.json)")
    ap.add_argument("--note", default="", help="what the table should say about the host, e.g. its other load")
    ap.add_argument(
        "--tokens", default=",".join(map(str, TOKENS)), help="forward sizes, comma-separated (default 1,4,16,64)"
    )
    ap.add_argument(
        "--shape",
        default=_shape_arg(SHAPE),
        help="the MoE layer: hidden,inter,experts,top_k (default the quick probe's; the source profile must hold "
        "cpu_moe curves of it at --threads for the prediction)",
    )
    ap.add_argument(
        "--reanalyse",
        metavar="JSON",
        help="recompute the table of a cpu-isa-*.json this host wrote, from its samples, with the current derive",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)  # internal: measure this process's build into this file
    a = ap.parse_args()
    tokens = tuple(int(t) for t in a.tokens.split(","))
    shape = dict(zip(("hidden", "inter", "experts", "top_k"), (int(x) for x in a.shape.split(","))))
    if a.child:
        Path(a.child).write_text(json.dumps(measure_build(a.threads, a.repeats, tokens, shape)))
        return
    if a.reanalyse:
        path = Path(a.reanalyse)
        old = json.loads(path.read_text())
        rounds = old["raw"]
        tokens = tuple(sorted({r["tokens"] for r in old["rows"]}))
        d = summarize(rounds, old["threads"], tokens, old["shape"])
        d["note"] = old.get("note", "")
        d["raw"] = rounds
        out, name = path.parent, path.stem
    else:
        rounds = {b: [] for b in a.builds.split(",")}
        for i in range(a.rounds):
            for b in rounds:
                print(f"round {i + 1}/{a.rounds}: {b}", flush=True)
                rounds[b].append(run_child(b, a.threads, a.repeats, tokens, shape))
        d = summarize(rounds, a.threads, tokens, shape)
        d["note"] = a.note
        d["raw"] = rounds
        out = Path(a.out) if a.out else results_dir()
        out.mkdir(parents=True, exist_ok=True)
        name = f"cpu-isa-{a.tag}" if a.tag else "cpu-isa"
    (out / f"{name}.json").write_text(json.dumps(d, indent=1) + "\n")
    md = markdown(d)
    (out / f"{name}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
