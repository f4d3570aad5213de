"""TP 2 over gloo (two CPU processes) computes what TP 1 computes: sharded attention heads, shared
and GPU experts by I/tp, CPU experts on rank 0, all-reduces, the layerwise per-expert barrier."""

import torch
from kttune.runner.path_runner import PathRunner
from kttune.runner.stack import StackOptions, build_stack, small_spec
from kttune.runner.tp import TpJob, run_tp
from kttune.spec.loader import load_model

PROMPTS = ((100, 64, 64, None), (64, 64, 64, "layerwise"))  # a layerwise chunk then a hybrid tail; layerwise alone


def _tp1(name, method, opts):
    spec = load_model(name, method)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        st = build_stack(small_spec(spec), spec.router, method, opts)
        r = PathRunner(st)
        out = []
        for p, c, t, f in PROMPTS:
            run = r.run_prompt(p, c, t, f)
            out.append((run, r.last_hidden.float()))
        st.close()
        return out
    finally:
        torch.set_num_threads(before)


def test_tp2_over_gloo_equals_tp1():
    for name, method in (("kimi-k2-thinking", "RAWINT4"),):  # MLA, shared experts, router bias, int4 re-sent
        opts = StackOptions(layers=2, gpu_experts=4, cpuinfer=1, max_tokens=128, device="cpu")
        one = _tp1(name, method, opts)
        two = run_tp(TpJob(name, method, 2, opts, PROMPTS, small=True, backend="gloo"), timeout_s=300)
        for (run1, h1), (run2, h2) in zip(one, two):
            assert run2["tp"] == 2 and [f["path"] for f in run2["forwards"]] == list(run1.paths)
            h2 = torch.from_numpy(h2)
            rel = ((h2 - h1).abs().mean() / h1.abs().mean()).item()
            assert rel < 0.03, (name, rel)
