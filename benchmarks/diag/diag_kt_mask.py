"""Does kt-kernel skip the experts its `gpu_experts_mask` names, and when must the mask be set?

sglang-kt's KT wrapper sends the CPU every token's raw top-k ids and leaves the GPU-resident experts
to the mask it passed when the layer was built (docs/path-runner.md); the path runner sends them as
id -1 instead. On the GPU box a mask did not change Mixtral-8x7B's time or output, while on the
development VM it cut both to the -1 ids'; this found why: kt-kernel's `MOEConfig` read a mask address
below 2**31 (the GPU box's heap) as a GPU-expert count, which `kttune.kernels.kt_moe.moe_config` now
avoids (docs/path-runner.md#kt-kernels-gpu-expert-mask; the file records the addresses and whether each
config holds its mask). It times, in interleaved rounds, one layer shape four ways and checks each
output against the -1 ids' output:

- none: no expert masked, raw ids (the whole layer);
- mask after build: the first N experts masked on a built layer, raw ids (what the diagnostics did);
- mask at build: a second layer built with the first N experts masked, raw ids (what sglang-kt does);
- ids -1: no mask, the first N experts' ids sent as -1 (what the path runner does).

Per way: the median time over rounds (each round: a warm-up and `--calls` timed calls, their median,
`diag_common.timed_calls`),
its ratio to "none" paired by round (`kttune.protocol.compare`), and the output's relative distance
to the -1 ids' output (0: the masked experts were skipped; about their share of the output: they
were computed and added).

    python benchmarks/diag/diag_kt_mask.py --out F.json [--model mixtral-8x7b] [--method BF16] [--tokens 256] [--masked 2]
        [--threads 11] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from diag_common import masked, timed_calls

WAYS = ("none", "mask after build", "mask at build", "ids -1")


def software(layer) -> dict:
    """What ran the layer: torch, kt-kernel's version, the CPU variant it loaded and that extension's
    file digest (two hosts that disagree on the mask are told apart by what they ran)."""
    import hashlib

    import torch

    ext = Path(layer.kt.ext.__file__) if getattr(layer.kt.ext, "__file__", None) else None
    return {
        "torch": torch.__version__,
        "kt_kernel": layer.kt.version,
        "variant": layer.variant,
        "extension": ext.name if ext else None,
        "extension_sha256": hashlib.sha256(ext.read_bytes()).hexdigest()[:16] if ext else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="mixtral-8x7b")
    ap.add_argument("--method", default="BF16", help="kt-kernel method of the experts (BF16, FP8, AMXINT4, ...)")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--masked", type=int, default=2)
    ap.add_argument("--threads", type=int, default=11)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()

    import torch

    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.kernels.routing import random_routing
    from kttune.probes.inventory import host_line
    from kttune.protocol.stats import compare, estimate
    from kttune.spec.loader import load_model

    spec = load_model(a.model, a.method)
    host = HostExperts.random(a.method, spec.hidden_size, spec.moe_intermediate_size, spec.num_experts, seed=0)
    with quiet_stdout(to_stderr=True):
        plain = KtMoeLayer(host, top_k=spec.top_k, threads=a.threads, max_tokens=a.tokens)
        # sglang-kt's order: the mask filled before the layer is built and its weights loaded
        built = KtMoeLayer(host, top_k=spec.top_k, threads=a.threads, max_tokens=a.tokens, gpu_experts=a.masked)
    ids, w = random_routing(a.tokens, spec.num_experts, spec.top_k, seed=a.tokens)
    neg = ids.masked_fill(ids < a.masked, -1)
    x = (torch.randn(a.tokens, spec.hidden_size, generator=torch.Generator().manual_seed(0)) * 0.5).to(torch.bfloat16)
    outs = {way: torch.empty_like(x) for way in WAYS}

    def run(way: str) -> float:
        layer = built if way == "mask at build" else plain
        i = neg if way == "ids -1" else ids

        def call() -> float:
            return timed_calls(lambda: layer.forward(x, i, w, outs[way]), a.calls)

        return masked(plain, a.masked, call) if way == "mask after build" else call()

    rows = []
    rng = random.Random(0)
    for r in range(a.rounds):
        order = list(WAYS)
        rng.shuffle(order)
        for way in order:
            rows.append({"round": r, "way": way, "ms": run(way)})
        print(f"round {r + 1}/{a.rounds}", flush=True)
    ref = outs["ids -1"].float()
    est = {
        way: estimate([x["ms"] for x in rows if x["way"] == way], rounds=[x["round"] for x in rows if x["way"] == way])
        for way in WAYS
    }
    summary = []
    for way in WAYS:
        dist = ((outs[way].float() - ref).norm() / ref.norm()).item()
        item = {"way": way, "estimate": est[way].to_dict(), "output_vs_ids_minus_1": dist}
        if way != "none":
            item["vs_none"] = compare(est["none"], est[way]).to_dict()
        summary.append(item)
        c = item.get("vs_none")
        tail = f"  /none {c['ratio']:.3f} [{c['low']:.3f}-{c['high']:.3f}]" if c else ""
        print(f"{way:18s} {est[way].median:8.1f} ms{tail}  output off the -1 ids' by {dist:.3f}")
    low = [layer.gpu_mask.data_ptr() < 2**31 for layer in (plain, built)]
    held = [layer._cfg.gpu_experts_mask == layer.gpu_mask.data_ptr() for layer in (plain, built)]
    print(f"mask addresses below 2**31: {low}; held by kt-kernel's configs: {held}")
    plain.close()
    built.close()
    doc = {
        "host": host_line(),
        "software": software(plain),
        "model": a.model,
        "method": a.method,
        "tokens": a.tokens,
        "masked": a.masked,
        "experts": spec.num_experts,
        "threads": a.threads,
        "rounds": a.rounds,
        "calls": a.calls,
        "kernel_class": plain.kernel_class,
        # kt-kernel reads a mask address that fits in 32 bits as a GPU-expert count unless the config is
        # built by kttune.kernels.kt_moe.moe_config (docs/path-runner.md#kt-kernels-gpu-expert-mask)
        "mask_addresses_below_2_31": low,
        "config_masks_set": held,
        "rows": rows,
        "summary": summary,
    }
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
