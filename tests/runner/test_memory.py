"""The runner-only memory terms (kttune.runner.memory): they follow the runner's own code, on
records built here (the measured peaks: tests/memory/test_vram_phases.py)."""

from __future__ import annotations


def _run(model: str, method: str, device: str, forwards, label: str = "slots=2,group=2,driver=stream"):
    from kttune.runner.result import ForwardRecord, PathRun

    fw = tuple(ForwardRecord(m, p, path, (1.0,), (0.5,), (0.5,)) for m, p, path in forwards)
    return PathRun(
        model=model,
        method=method,
        tp=1,
        layers_run=2,
        model_layers=61,
        model_moe_layers=58,
        gpu_experts=0,
        chunk=4096,
        threshold=1024,
        cpuinfer=13,
        prompt_tokens=sum(m for m, _, _ in forwards),
        forwards=fw,
        device=device,
        backends={"layerwise_pipeline": label},
    )


def test_pipeline_ring_is_four_experts_for_the_repacking_method_only():
    from kttune.kernels.expert_weights import kinds_nbytes, slot_kinds
    from kttune.runner.memory import pipeline_ring_bytes
    from kttune.spec.loader import load_model

    kimi = load_model("kimi-k2-thinking", "RAWINT4")
    run = _run("kimi-k2-thinking", "RAWINT4", "NVIDIA H200", [(4096, 0, "layerwise")])
    per_expert = kinds_nbytes(slot_kinds("RAWINT4", kimi.hidden_size, kimi.moe_intermediate_size))
    assert pipeline_ring_bytes(kimi, run) == 2 * 2 * per_expert  # two ring entries of two experts
    assert (
        pipeline_ring_bytes(
            kimi,
            _run(
                "kimi-k2-thinking",
                "RAWINT4",
                "NVIDIA H200",
                [(64, 0, "layerwise")],
                "slots=2,group=1,post_batch=4,driver=stream",
            ),
        )
        == 2 * 4 * per_expert
    )
    ds = load_model("deepseek-v3", "FP8")
    assert pipeline_ring_bytes(ds, _run("deepseek-v3", "FP8", "NVIDIA H200", [(4096, 0, "layerwise")])) == 0


def test_runner_only_terms_follow_the_runners_code():
    """MLA's value padding exists only on CUDA and grows with the expanded prefix; with a prefix
    under SGLang's one-shot threshold the runner still expands where SGLang absorbs (that difference,
    of either sign, is the runner's); a GQA model has neither."""
    from kttune.runner.memory import runner_only_bytes
    from kttune.spec.loader import load_model

    ds = load_model("deepseek-v3", "FP8")
    fw = [(4096, 0, "layerwise"), (4096, 4096, "layerwise"), (4096, 16384, "layerwise")]
    gpu = _run("deepseek-v3", "FP8", "NVIDIA H200", fw)
    cpu = _run("deepseek-v3", "FP8", "cpu (x86_64)", fw)
    g = [runner_only_bytes(ds, gpu, f)["attention"] for f in gpu.forwards]
    c = [runner_only_bytes(ds, cpu, f)["attention"] for f in cpu.forwards]
    assert all(a > b for a, b in zip(g, c))  # padding on CUDA only
    assert g[2] > g[0]  # a longer expanded prefix, more padded values
    assert c[1] != c[0] == c[2]  # prefix 4096: the runner expands where SGLang absorbs; 16384: both expand
    q = load_model("qwen3-30b-a3b", "BF16")
    qr = _run("qwen3-30b-a3b", "BF16", "NVIDIA H200", fw)
    assert len({runner_only_bytes(q, qr, f)["attention"] for f in qr.forwards}) == 1


def test_the_layerwise_slot_is_held_from_the_first_layerwise_forward_until_the_split_changes():
    """As the stack does (set_gpu_experts / set_threads drop the pipeline): the measured H200 runs of
    glm-4.5-air at 13 threads (a layerwise run at 17 GPU experts, then a hybrid one at 28) held no
    slot in the second, and the predicted peak over-counted it 2.7x before."""
    from dataclasses import replace

    from kttune.runner.memory import layerwise_slot_held, predicted_runner_peak_bytes
    from kttune.spec.loader import load_model

    hy = _run("qwen3-30b-a3b", "BF16", "NVIDIA H200", [(1024, 0, "hybrid")])
    lw = _run("qwen3-30b-a3b", "BF16", "NVIDIA H200", [(4096, 0, "layerwise")])
    runs = [hy, lw, hy, replace(hy, gpu_experts=8), replace(lw, cpuinfer=11), replace(hy, cpuinfer=11)]
    assert layerwise_slot_held(runs) == [False, True, True, False, True, True]
    spec = load_model("qwen3-30b-a3b", "BF16")
    with_slot, without = (predicted_runner_peak_bytes(spec, hy, h) for h in (True, False))
    assert without["layerwise_slot"] == without["pipeline_ring"] == 0 < with_slot["layerwise_slot"]
    assert predicted_runner_peak_bytes(spec, hy)["total"] == with_slot["total"]  # unknown history: the larger


def test_a_run_of_interleaved_rounds_holds_the_slot_when_its_split_has_a_layerwise_run():
    """Its reported peak is the largest of its rounds, and from the second round on every layerwise
    run of its split has run before it: the H200 sweep of qwen3-next-80b-a3b listed a hybrid run
    first, measured 3.49 GB with the 3.0 GB slot in it, predicted 0.58 GB before."""
    from dataclasses import replace

    from kttune.runner.memory import layerwise_slot_held

    hy = _run("qwen3-30b-a3b", "BF16", "NVIDIA H200", [(1024, 0, "hybrid")])
    lw = _run("qwen3-30b-a3b", "BF16", "NVIDIA H200", [(4096, 0, "layerwise")])
    timed = {"measured_ms": {"n": 5}}
    runs = [replace(hy, timing=timed), replace(lw, timing=timed), replace(hy, gpu_experts=8, timing=timed)]
    assert layerwise_slot_held(runs) == [True, True, False]
    once = {"measured_ms": {"n": 1}}  # one sample: the order it ran in decides, as before
    assert layerwise_slot_held([replace(hy, timing=once), replace(lw, timing=once)]) == [False, True]


def test_mxfp4_runs_peaks_are_the_runners_own_layout():
    """gpt-oss's MXFP4 sweeps on H100 instance ar (benchmarks/results/2026-12-07-h100-pcie5-xeon-amx-16c,
    66 runs, chunks 2-1,536): the runner holds one repacked copy of each resident expert and one
    full-layer slot at bf16 scales (docs/path-runner.md#mxfp4), not sglang-kt's raw and prepared
    copies. Held out, every measured peak lies within 1% below to 8% above the prediction; read with
    sglang-kt's MXFP4 terms instead, the layerwise runs' slot alone would be counted twice."""
    import json
    from pathlib import Path

    from kttune.memory import vram
    from kttune.runner.memory import layerwise_slot_held, predicted_runner_peak_bytes, static_runner_bytes
    from kttune.runner.result import runs_in_results
    from kttune.spec.loader import load_model
    from kttune.spec.methods import get_method

    folder = Path(__file__).parents[2] / "benchmarks/results/2026-12-07-h100-pcie5-xeon-amx-16c"
    ratios, slots = [], []
    for f in sorted(folder.glob("mxfp4-runner-crossover-*.json")):
        for _, runs in runs_in_results(json.loads(f.read_text())):
            for run, held in zip(runs, layerwise_slot_held(runs)):
                spec = load_model(run.model, run.method)
                ratios.append(predicted_runner_peak_bytes(spec, run, held)["total"] / run.peak_allocated_bytes)
                if held:
                    mine = static_runner_bytes(spec, run, held)["layerwise_slot"]
                    slots.append(vram.layerwise_slot_bytes(spec, get_method("MXFP4"), 1) / mine)
    assert len(ratios) == 66
    assert 0.99 <= min(ratios) and max(ratios) <= 1.08, (min(ratios), max(ratios))
    assert slots and min(slots) > 2.0  # sglang-kt's two slots of raw (fp32 scales) and prepared copies
