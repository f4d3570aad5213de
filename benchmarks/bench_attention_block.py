"""The attention block's fixed cost: what a decoder layer's non-expert part takes besides its SDPA and
its GEMMs, measured per model, and whether the path runner sees the same.

1. Per model, the attention-block probe (`probes/gpu_attention.probe_attention_block`: norms,
   projections, rotary, attention, residual, router, timed wall-clock between device syncs as the
   runner times its `attn` phase) at 16-4096 tokens; the curves are written as profile curves
   (`--out DIR/attention-block.curves.json`) with the fit's fixed part per model.
2. SDPA over a cached prefix against the same work from an empty cache (the lower-right causal
   mask the runner's prefix attention uses against the square causal kernel), at one shape.
3. `--runner MODEL`: in the same process, the runner's `attn` phase (median of its layers over
   repeats, after warm-up) at the probe's sizes, on both paths, next to the probe's curve.
4. `--compare-eager`: per model, the block again with RMSNorm and rotary as the piecewise torch ops
   (`kernels.decoder.TRITON_ELEMENTWISE = False`, the runner before the Triton kernels), the two
   probes alternated model by model, and each version's kernel launches per block counted at
   `--launch-tokens` (torch.profiler's device events).

    python benchmarks/bench_attention_block.py --out DIR [--models a,b,...] [--runner qwen3-30b-a3b] [--compare-eager]
    python benchmarks/bench_attention_block.py --merge DIR/attention-block.json --into profiles/X.json  # anywhere

`--merge` puts a run's block curves into a measured profile of the same machine kind, each in place
of that profile's block curve of the same model, and says so in the profile's lab notes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

MODELS = (
    "qwen3-30b-a3b",
    "qwen3-235b-a22b-fp8",
    "glm-4.5-air",
    "glm-4.7",
    "minimax-m2.1",
    "deepseek-v3",
    "kimi-k2-thinking",
)


def fixed_part(curve) -> float:
    from kttune.cost.components import fit_curves

    return fit_curves([curve]).coef[0]


def prefix_sdpa(out: list[str]) -> dict:
    """Square causal SDPA of T tokens against T new tokens over a prefix P (lower-right mask), as
    `kttune.kernels.decoder.causal_attention` runs them, at the Qwen3-30B-A3B shape."""
    import torch

    from kttune.kernels.decoder import causal_attention
    from kttune.probes.gpu_common import cuda_time_point

    dev = torch.device("cuda", 0)
    res = {}
    for t, p in ((4096, 0), (4096, 4096), (4096, 16384), (16384, 0), (16384, 16384)):
        q = torch.randn(t, 32, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn(p + t, 4, 128, device=dev, dtype=torch.bfloat16)
        v = torch.randn(p + t, 4, 128, device=dev, dtype=torch.bfloat16)
        pt = cuda_time_point(lambda: causal_attention(q, k, v, 128**-0.5), x=t, min_total_ms=50)
        flops = 2.0 * t * (p + (t + 1) / 2) * 32 * 256
        res[f"{t}+{p}"] = {"ms": pt.t_ms, "p10": pt.t_ms_p10, "p90": pt.t_ms_p90, "tflops": flops / pt.t_ms / 1e9}
        out.append(f"sdpa qwen3 shape T={t} prefix={p}: {pt.t_ms:.2f} ms ({flops / pt.t_ms / 1e9:.0f} TFLOP/s)")
    return res


def launches(spec, tokens: int) -> int:
    """Device kernels (and copies) one attention block of `spec` at `tokens` runs, after a warm-up
    call, counted from torch.profiler's device events."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from kttune.kernels.attention_shape import attention_shape, block_layer_id
    from kttune.kernels.decoder import Attention, AttnCache, LayerWeights, attention_block

    dev = torch.device("cuda", 0)
    attn = Attention(attention_shape(spec, block_layer_id(spec)), dev)
    w = LayerWeights.random(spec.hidden_size, spec.num_experts, 0, spec.router, dev)
    x0 = torch.randn(tokens, spec.hidden_size, device=dev, dtype=torch.bfloat16).mul_(0.5)
    pos = torch.arange(tokens, device=dev)
    attention_block(attn, w, x0.clone(), pos, AttnCache(), spec.router, spec.top_k)
    torch.cuda.synchronize(dev)
    x = x0.clone()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        attention_block(attn, w, x, pos, AttnCache(), spec.router, spec.top_k)
        torch.cuda.synchronize(dev)
    n = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    del attn, w, x, x0
    torch.cuda.empty_cache()
    return n


def runner_attn(name: str, curve, out: list[str], repeats: int = 5) -> list[dict]:
    """The runner's attn phase on `name` (K = 2, BF16 / the model's method, 13 threads) at the probe's
    sizes, both paths, median over layers x repeats after a warm-up run of each."""
    import torch

    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.runner.path_runner import PathRunner
    from kttune.runner.stack import StackOptions, build_stack
    from kttune.spec.loader import load_model

    spec = load_model(name)
    sizes = [int(p.x) for p in curve.points if p.x >= 64]
    with quiet_stdout(to_stderr=True):
        st = build_stack(
            spec,
            spec.router,
            spec.default_method,
            StackOptions(layers=2, cpuinfer=13, max_tokens=max(sizes), cpu_max_tokens=max(sizes), device="cuda"),
        )
    r = PathRunner(st)
    rows = []
    probe = {int(p.x): p.t_ms for p in curve.points}
    for path in ("hybrid", "layerwise"):
        for m in sizes:
            r.run_prompt(m, m, m, path)  # warm-up at this size
            xs = []
            for _ in range(repeats):
                run = r.run_prompt(m, m, m, path)
                xs += list(run.forwards[0].attn_ms)
            med = statistics.median(xs)
            rows.append({"path": path, "tokens": m, "runner_attn_ms": med, "runner_attn_all": xs, "probe_ms": probe[m]})
            out.append(
                f"runner {name} {path:9s} M={m:5d}: attn {med:6.2f} ms "
                f"[{min(xs):.2f}-{max(xs):.2f}] probe {probe[m]:6.2f} ms ({med / probe[m] - 1:+.0%})"
            )
    st.close()
    torch.cuda.empty_cache()
    return rows


def merge(result: Path, into: Path) -> list[str]:
    """The block curves of `result` (this script's JSON) into the profile `into`, replacing its
    block curve of each model measured; returns the models replaced."""
    from dataclasses import replace

    from kttune.hw.profile import curve_from_dict, load_profile, save_profile

    new = [curve_from_dict(c) for c in json.loads(result.read_text())["curves"]]
    models = {c.params["model"] for c in new}
    prof = load_profile(into)
    kept = tuple(c for c in prof.curves if not (c.kind == "attention_block" and c.params.get("model") in models))
    backends = sorted({c.backend for c in new})
    note = (
        f"attention_block curves of {', '.join(sorted(models))} replaced from {result.parent.name}/{result.name} "
        f"({'; '.join(backends)})"
    )
    prov = replace(prof.provenance, lab_notes=(*prof.provenance.lab_notes, note))
    save_profile(replace(prof, curves=kept + tuple(new), provenance=prov), into)
    return sorted(models)


def main() -> None:
    if sys.argv[1:2] == ["--merge"]:
        ap = argparse.ArgumentParser()
        ap.add_argument("--merge", type=Path, required=True)
        ap.add_argument("--into", type=Path, required=True)
        a = ap.parse_args()
        print(f"replaced the block curves of {', '.join(merge(a.merge, a.into))} in {a.into}")
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runner", default="qwen3-30b-a3b", help="model for the runner check ('' = none)")
    ap.add_argument(
        "--compare-eager", action="store_true", help="also the block with the piecewise torch RMSNorm and rotary"
    )
    ap.add_argument("--launch-tokens", type=int, default=11755)
    a = ap.parse_args()
    from kttune.kernels import decoder
    from kttune.probes.gpu_attention import probe_attention_block
    from kttune.spec.loader import load_model

    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    curves = []
    t0 = time.perf_counter()
    eager_curves, counts = [], {}
    for name in a.models.split(","):
        spec = load_model(name)
        versions = (True, False) if a.compare_eager else (True,)
        for fused in versions:
            decoder.TRITON_ELEMENTWISE = fused
            c = probe_attention_block(spec)
            (curves if fused else eager_curves).append(c)
            tag = "block" if fused else "eager"
            if a.compare_eager:
                counts.setdefault(name, {})[tag] = launches(spec, a.launch_tokens)
            log.append(
                f"{tag} {name}: "
                + " ".join(f"{int(p.x)}:{p.t_ms:.2f}[{p.t_ms_p10:.2f}-{p.t_ms_p90:.2f}]" for p in c.points)
                + f"  fixed part {fixed_part(c):.2f} ms"
                + (f"  {counts[name][tag]} launches at {a.launch_tokens} tokens" if a.compare_eager else "")
            )
            print(log[-1], flush=True)
        decoder.TRITON_ELEMENTWISE = True
    res = {"curves": [asdict(c) for c in curves], "prefix_sdpa": prefix_sdpa(log)}
    if a.compare_eager:
        res["eager_curves"] = [asdict(c) for c in eager_curves]
        res["launches"] = {"tokens": a.launch_tokens, "per_model": counts}
    print("\n".join(log[-5:]), flush=True)
    if a.runner:
        c = next(c for c in curves if c.params["model"] == a.runner)
        res["runner"] = runner_attn(a.runner, c, log)
    res["wall_s"] = time.perf_counter() - t0
    (out_dir / "attention-block.json").write_text(json.dumps(res, indent=1))
    (out_dir / "attention-block.log").write_text("\n".join(log) + "\n")
    print("\n".join(log), flush=True)


if __name__ == "__main__":
    sys.exit(main())
