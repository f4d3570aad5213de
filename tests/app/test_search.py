"""The library calls behind the CLI: their result objects against the library computed directly."""

from __future__ import annotations

import json

import pytest

from kttune import app
from kttune.cost.components import Components
from kttune.cost.prefill import crossover_tokens
from kttune.search.launch import default_paths, launch_argv
from kttune.app.serialize import evaluation_dict
from kttune.hw.registry import default_shipped_name, load_shipped, shipped_names
from kttune.search.evaluate import Budget, evaluate
from kttune.search.workload import load_workload
from kttune.spec.loader import load_model
from kttune.units import GIB


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """No probed profile of this machine: the default profile is the shipped one."""
    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(tmp_path / "cache"))


def test_resolve_inputs_is_the_loaders_output():
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB, host_ram_bytes=256 * GIB, workload="chat", vram_margin=0.1)
    req = inp.request
    m = load_model("qwen3-30b-a3b")
    assert req.model == m and req.method == m.default_method and req.tp == 1
    assert req.profile.fingerprint == load_shipped(default_shipped_name()).fingerprint
    assert req.workload == load_workload("chat").clipped(m.max_position_embeddings)
    assert req.budget == Budget(32 * GIB, 256 * GIB, 0.1)
    assert inp.paths == default_paths(m, m.default_method, None, None)


def test_search_outcome_holds_the_pick_its_explanation_argv_and_json(tmp_path):
    inp = app.resolve_inputs("qwen3-30b-a3b", 32 * GIB)
    out = app.search(inp, trials=40, seed=1, storage=str(tmp_path / "s.journal"))
    req, best = inp.request, out.result.best
    assert out.best is best and out.explanation.evaluation is best  # the pick is not re-evaluated
    comp = Components(req.profile, req.model, req.method, req.tp)
    direct = evaluate(comp, best.cfg, req.workload, req.budget)
    assert direct.mean_ttft_ms == pytest.approx(best.mean_ttft_ms) and direct.decode_tok_s == pytest.approx(
        best.decode_tok_s
    )
    assert out.explanation.crossover_tokens == crossover_tokens(comp, best.cfg)
    assert list(out.argv) == launch_argv(req.model, best.cfg, best.vram, req.budget.vram_bytes_per_gpu, inp.paths)
    d = json.loads(json.dumps(out.to_dict(), default=str))
    assert d["pick"] == json.loads(json.dumps(evaluation_dict(best), default=str))
    assert d["command"] == list(out.argv)
    assert d["crossover_tokens"] == out.explanation.crossover_tokens
    assert d["study"]["trials"] == 40 and d["study"]["name"] == out.result.study_name
    assert d["profile"]["fingerprint"] == req.profile.fingerprint and d["model"]["name"] == "qwen3-30b-a3b"
    assert len(d["pareto"]) == len(out.result.pareto)


def test_explain_outcome_against_the_cost_model():
    inp = app.resolve_inputs("minimax-m2.1", 48 * GIB, host_ram_bytes=512 * GIB)
    out = app.explain_flags(inp, gpu_experts=8, chunk=16384, threshold=4096, max_total_tokens=32768)
    req = inp.request
    cfg = out.evaluation.cfg
    assert (cfg.num_gpu_experts, cfg.chunked_prefill_size, cfg.gpu_prefill_token_threshold, cfg.max_total_tokens) == (
        8,
        16384,
        4096,
        32768,
    )
    comp = Components(req.profile, req.model, req.method, req.tp)
    assert cfg.cpuinfer_threads in comp.cpu_thread_options()
    assert cfg.cpuinfer_threads < (req.profile.inventory.cpu.physical_cores or 10**9)
    assert out.evaluation == evaluate(comp, cfg, req.workload, req.budget)
    assert out.feasible == out.evaluation.feasible
    d = out.to_dict()
    assert d["evaluation"] == evaluation_dict(out.evaluation)
    assert [r["prompt_tokens"] for r in d["by_prompt_tokens"]] == [r.prompt_tokens for r in out.explanation.rows]
    assert d["command"] == launch_argv(req.model, cfg, out.evaluation.vram, req.budget.vram_bytes_per_gpu, inp.paths)


def test_listings():
    listing = app.list_profiles()
    assert [p.name for p in listing.shipped] == shipped_names()
    assert [p.name for p in listing.shipped if p.default] == [default_shipped_name()]
    assert listing.this_machine is None
    assert listing.to_dict()["shipped"][0]["name"] == shipped_names()[0]
    assert "rag" in [w.name for w in app.list_workloads().workloads]
    assert "qwen3-30b-a3b" in [e.name for e in app.list_models().entries]
