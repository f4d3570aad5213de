"""`kttune search` end to end on real catalog configs: the printed command obeys docs/sglang-kt.md."""

from __future__ import annotations

import json

import pytest

from pathlib import Path

from kttune.cli import main
from kttune.hw.registry import default_shipped_name, load_shipped
from kttune.spec.catalog import catalog_names
from kttune.spec.methods import get_method

README = Path(__file__).resolve().parents[2] / "README.md"


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def check_command(argv: list[str], result: dict) -> None:
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    method = get_method(flag(argv, "--kt-method"))
    # both flags whose absence silently turns KT off are always emitted
    assert flag(argv, "--kt-weight-path")
    n = int(flag(argv, "--kt-num-gpu-experts"))
    assert 0 <= n <= result["model"]["experts"]
    thr = int(flag(argv, "--kt-gpu-prefill-token-threshold"))
    chunk = int(flag(argv, "--chunked-prefill-size"))
    if not method.layerwise:
        assert thr == 0
    if thr:
        assert thr <= chunk
    assert int(flag(argv, "--max-total-tokens")) > 0
    assert int(flag(argv, "--kt-cpuinfer")) >= 1 and int(flag(argv, "--kt-threadpool-count")) >= 1
    assert 0 < float(flag(argv, "--mem-fraction-static")) <= 0.98
    peak = result["pick"]["vram_bytes_per_gpu"]["runtime_peak_bytes"]
    assert peak <= result["budget"]["vram_bytes_per_gpu"]


def run_json(capsys, argv) -> dict:
    code = main(argv + ["--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def readme_main_job() -> list[str]:
    """The README's main-job command line, as printed there."""
    line = next(x for x in README.read_text().splitlines() if "# the main job" in x)
    cmd = line.split("&&", 1)[1].split("#", 1)[0].split()
    assert cmd[0] == "kttune"
    return cmd[1:]


def test_readme_main_job(capsys, tmp_path, monkeypatch):
    """On a fresh install (empty cache: no probed profile of this machine), the README's main job
    runs on the shipped default profile, which is a measured one, and says so."""
    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(tmp_path / "cache"))
    code = main(readme_main_job() + ["--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    res = json.loads(out.out)
    check_command(res["command"], res)
    shipped = load_shipped(default_shipped_name())
    assert shipped.provenance.kind == "measured"
    assert res["profile"]["kind"] == "measured"
    assert res["profile"]["fingerprint"] == shipped.fingerprint
    assert res["profile"]["machine"] == shipped.provenance.machine
    assert f"profile: {shipped.provenance.machine} (measured" in " ".join(out.err.split())
    assert res["study"]["trials"] == 300 and res["study"]["new_trials"] == 300
    assert res["study"]["storage"].startswith(str(tmp_path / "cache"))


@pytest.mark.parametrize("name", catalog_names())
def test_every_catalog_model_at_a_budget_where_it_fits(capsys, tmp_path, name):
    res = run_json(
        capsys,
        [
            "search",
            "--model",
            name,
            "--vram",
            "80G",
            "--host-ram",
            "2T",
            "--trials",
            "40",
            "--seed",
            "3",
            "--storage",
            str(tmp_path / "s.journal"),
        ],
    )
    check_command(res["command"], res)


def test_deepseek_v4_is_launched_as_sglang_runs_it(capsys, tmp_path):
    """DeepSeek-V4-Flash: MXFP4 experts, SGLang's compressed backend and its fp8 cache said in the
    command (SGLang forces both), and a pick whose peak fits the budget (docs/deepseek-v4.md)."""
    res = run_json(
        capsys,
        [
            "search",
            "--model",
            "deepseek-v4-flash",
            "--vram",
            "48G",
            "--host-ram",
            "256G",
            "--trials",
            "30",
            "--seed",
            "1",
            "--storage",
            str(tmp_path / "s.journal"),
        ],
    )
    argv = res["command"]
    check_command(argv, res)
    assert flag(argv, "--kt-method") == "MXFP4"
    assert flag(argv, "--attention-backend") == "compressed" and flag(argv, "--kv-cache-dtype") == "fp8_e4m3"


def test_amx_method_search_keeps_threshold_zero(capsys, tmp_path):
    res = run_json(
        capsys,
        [
            "search",
            "--model",
            "deepseek-v3",
            "--kt-method",
            "AMXINT4",
            "--vram",
            "48G",
            "--host-ram",
            "1T",
            "--trials",
            "40",
            "--storage",
            str(tmp_path / "s.journal"),
        ],
    )
    check_command(res["command"], res)
    assert flag(res["command"], "--kt-gpu-prefill-token-threshold") == "0"
    assert "CPU-weight" in flag(res["command"], "--kt-weight-path")


def test_tensor_parallel_search(capsys, tmp_path):
    res = run_json(
        capsys,
        [
            "search",
            "--model",
            "minimax-m2.1",
            "--vram",
            "48G",
            "--gpus",
            "4",
            "--host-ram",
            "512G",
            "--trials",
            "40",
            "--storage",
            str(tmp_path / "s.journal"),
        ],
    )
    check_command(res["command"], res)
    assert flag(res["command"], "--tensor-parallel-size") == "4"


def test_explain_prints_both_paths_and_the_crossover(capsys, tmp_path, monkeypatch):
    """The crossover printed and put in the JSON is the smallest 64-token multiple at which one
    layerwise MoE layer is no slower than a hybrid one, found here by a plain scan of the cost
    model; the per-length rows take the faster path on each side of it."""
    from dataclasses import replace

    from kttune.cost.components import Components
    from kttune.cost.prefill import hybrid_moe_layer, layerwise_moe_layer
    from tests.helpers import model

    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(tmp_path / "cache"))
    code = main(
        [
            "explain",
            "--model",
            "minimax-m2.1",
            "--vram",
            "48G",
            "--host-ram",
            "512G",
            "--gpu-experts",
            "8",
            "--chunk",
            "16384",
            "--threshold",
            "4096",
            "--max-total-tokens",
            "32768",
            "--json",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    res = json.loads(out.out)
    check_command(res["command"], {**res, "pick": res["evaluation"]})

    m = model("minimax-m2.1")
    comp = Components(load_shipped(default_shipped_name()), m, m.default_method, 1)
    cfg = replace(comp_cfg(res), method=m.default_method)
    cross = next(
        n
        for n in range(64, 65536 + 1, 64)
        if layerwise_moe_layer(comp, cfg, n).total_ms <= hybrid_moe_layer(comp, cfg, n).total_ms
    )
    assert res["crossover_tokens"] == cross
    assert f"crossover: {cross:,} tokens per forward" in " ".join(out.err.split())

    rows = {r["prompt_tokens"]: r for r in res["by_prompt_tokens"]}
    assert rows[65536]["forwards"] == "4 layerwise"
    assert rows[2048]["forwards"] == "1 hybrid"
    for n, r in rows.items():
        assert r["hybrid_ms"] > 0 and r["layerwise_ms"] > 0
        if n <= 16384 and abs(n - cross) > 64:  # one forward: the faster path is the one the crossover says
            assert (r["layerwise_ms"] < r["hybrid_ms"]) == (n > cross), n
        # the picked path is the one the threshold sends the forward to (one forward up to the chunk)
        if n <= 16384:
            assert r["picked_ms"] == pytest.approx(r["layerwise_ms"] if n >= 4096 else r["hybrid_ms"])
    fits = res["model_fits"]
    assert {"cpu_moe", "gpu_moe", "h2d", "stage_a"} <= set(fits)
    assert fits == json.loads(json.dumps(comp.fit_report(cfg.cpuinfer_threads, cfg.threadpool_count)))


def comp_cfg(res: dict):
    """The LaunchConfig of a JSON evaluation."""
    from kttune.config import LaunchConfig

    return LaunchConfig(**res["evaluation"]["flags"])


def test_models_and_profiles_and_workloads_list(capsys):
    assert main(["models", "--json"]) == 0
    names = [m["name"] for m in json.loads(capsys.readouterr().out)]
    assert {
        "kimi-k2-thinking",
        "deepseek-v3",
        "minimax-m2.1",
        "qwen3-235b-a22b",
        "qwen3-30b-a3b",
        "glm-4.7",
        "qwen3-next-80b-a3b",
    } <= set(names)
    assert main(["profiles", "--json"]) == 0
    prof = json.loads(capsys.readouterr().out)
    assert any(p["default"] for p in prof["shipped"])
    assert main(["workloads", "--json"]) == 0
    assert "rag" in [w["name"] for w in json.loads(capsys.readouterr().out)]


def test_model_directory_with_safetensors(capsys, tmp_path):
    """A model directory: config.json from the catalog plus a safetensors file whose header gives
    the exact non-expert bytes."""
    import numpy as np
    from safetensors.numpy import save_file

    from kttune.spec.catalog import catalog_config

    d = tmp_path / "Qwen3-30B-A3B"
    d.mkdir()
    cfg = {k: v for k, v in catalog_config("qwen3-30b-a3b").items() if not k.startswith("_")}
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(
        {
            "model.embed_tokens.weight": np.zeros((1024, 64), dtype=np.float16),
            "model.layers.0.mlp.experts.0.gate_proj.weight": np.zeros((8, 8), dtype=np.float16),
        },
        str(d / "model.safetensors"),
    )
    res = run_json(
        capsys,
        ["search", "--model", str(d), "--vram", "32G", "--trials", "30", "--storage", str(tmp_path / "s.journal")],
    )
    assert res["model"]["non_expert_bytes_measured"] is True
    assert res["model"]["non_expert_bytes"] == 1024 * 64 * 2
    assert flag(res["command"], "--model") == str(d)


def test_the_attention_backend_can_be_pinned(capsys):
    """An MLA model's backend is searched unless pinned: pinned, the pick and its command keep it; a
    name SGLang does not take is one line, exit 2 (docs/cost-model.md#mla-prefill-forms)."""
    argv = ["search", "-m", "deepseek-v3", "--vram", "80G", "--profile", "h200-pcie5-xeon-amx-16c"]
    argv += ["--host-ram", "2T", "--workload", "long-context", "--trials", "80", "--seed", "1", "--storage", ":memory:"]
    for pinned in ("triton", "flashinfer"):
        d = run_json(capsys, [*argv, "--attention-backend", pinned])
        assert d["pick"]["flags"]["attention_backend"] == pinned
        assert d["command"][d["command"].index("--attention-backend") + 1] == pinned
    assert main([*argv, "--attention-backend", "flash"]) == 2
    err = capsys.readouterr().err
    assert "'flash' is not an attention backend SGLang takes" in err and "Traceback" not in err
