"""`kttune explain -- COMMAND` end to end: a user's sglang-kt launch command in, the answer out.
Judged by the round trip (the command `search` prints explains to the same prediction as the
equivalent flags) and by the launch example of KT's layerwise-prefill document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kttune.cli import main

MEASURED = "h200-pcie5-xeon-amx-16c"
DOC_COMMAND = (Path(__file__).resolve().parents[1] / "fixtures" / "kt-layerwise-doc-launch.sh").read_text()


def run(capsys, argv, code=0):
    got = main(argv)
    out = capsys.readouterr()
    assert got == code, out.err
    return out


def test_the_command_search_prints_explains_to_the_same_prediction(capsys):
    s = json.loads(
        run(
            capsys,
            [
                "search",
                "-m",
                "qwen3-30b-a3b",
                "--vram",
                "32G",
                "--profile",
                MEASURED,
                "--trials",
                "80",
                "--seed",
                "2",
                "--storage",
                ":memory:",
                "--json",
            ],
        ).out
    )
    from_command = json.loads(
        run(
            capsys, ["explain", "--vram", "32G", "--profile", MEASURED, "--no-compare", "--json", "--", *s["command"]]
        ).out
    )
    f = s["pick"]["flags"]
    from_flags = json.loads(
        run(
            capsys,
            [
                "explain",
                "-m",
                "qwen3-30b-a3b",
                "--vram",
                "32G",
                "--profile",
                MEASURED,
                "--json",
                "--gpu-experts",
                str(f["num_gpu_experts"]),
                "--chunk",
                str(f["chunked_prefill_size"]),
                "--threshold",
                str(f["gpu_prefill_token_threshold"]),
                "--max-total-tokens",
                str(f["max_total_tokens"]),
                "--cpuinfer",
                str(f["cpuinfer_threads"]),
            ],
        ).out
    )
    assert from_command["evaluation"] == from_flags["evaluation"] == s["pick"]
    assert from_command["by_prompt_tokens"] == from_flags["by_prompt_tokens"]
    assert from_command["launch"]["unknown"] == [] and from_command["kttune_pick"] is None
    # the model came from the command's placeholder directory, named after the catalog entry
    assert from_command["model"]["name"] == "qwen3-30b-a3b"


def test_the_kt_doc_example_is_answered(capsys):
    out = run(
        capsys,
        [
            "explain",
            "-m",
            "minimax-m2",
            "--host-ram",
            "512G",
            "--profile",
            MEASURED,
            "--json",
            "--command",
            DOC_COMMAND,
        ],
    )
    d = json.loads(out.out)
    assert d["launch"]["read"]["num_gpu_experts"] == 32 and d["launch"]["read"]["cpuinfer_threads"] == 64
    fl = d["evaluation"]["flags"]
    assert (fl["chunked_prefill_size"], fl["gpu_prefill_token_threshold"], fl["num_gpu_experts"]) == (16384, 2048, 32)
    assert fl["cpuinfer_threads"] == 15  # 64 threads on the 16-core profile: its nearest measured count below the cores
    assert any("--kt-cpuinfer 64" in n for n in d["launch"]["assumed"])
    assert any("--max-total-tokens unset" in n for n in d["launch"]["assumed"])
    pred = d["evaluation"]["predicted"]
    assert pred["decode_tok_s_per_request"] * pred["decode_batch"] == pytest.approx(pred["decode_tok_s"])
    assert {r["prompt_tokens"] for r in d["by_prompt_tokens"]} >= {2048, 16384, 32768}
    assert any(r["forwards"].startswith("1 layerwise") for r in d["by_prompt_tokens"] if r["prompt_tokens"] == 16384)
    pick = d["kttune_pick"]
    assert pick["command"][:3] == ["python", "-m", "sglang.launch_server"]
    assert pick["changes"] and all(c["why"] for c in pick["changes"])
    assert pick["evaluation"]["predicted"]["mean_prefill_ms"] <= pred["mean_prefill_ms"]
    # the report went to stderr: the read flags, the comparison and kttune's command
    assert (
        "read from the command" in out.err
        and "what kttune would change" in out.err
        and "kttune's launch command" in out.err
    )


def test_sglang_flag_names_work_as_options(capsys):
    base = ["explain", "-m", "qwen3-30b-a3b", "--vram", "32G", "--profile", MEASURED, "--json"]
    a = json.loads(
        run(
            capsys,
            base
            + [
                "--kt-num-gpu-experts",
                "8",
                "--chunked-prefill-size",
                "16384",
                "--kt-gpu-prefill-token-threshold",
                "1024",
                "--kt-cpuinfer",
                "13",
            ],
        ).out
    )
    b = json.loads(
        run(capsys, base + ["--gpu-experts", "8", "--chunk", "16384", "--threshold", "1024", "--cpuinfer", "13"]).out
    )
    assert a["evaluation"] == b["evaluation"]


def test_a_command_without_kt_is_the_answer_no(capsys):
    err = run(
        capsys,
        [
            "explain",
            "--vram",
            "32G",
            "--",
            "python",
            "-m",
            "sglang.launch_server",
            "--model",
            "/m/Qwen3-30B-A3B",
            "--kt-num-gpu-experts",
            "8",
        ],
        code=1,
    ).err
    assert "--kt-weight-path" in err and "Traceback" not in err


def test_bad_explain_calls_are_one_line_errors(capsys):
    err = run(
        capsys, ["explain", "--vram", "32G", "--gpu-experts", "4", "--", "python", "-m", "sglang.launch_server"], code=2
    ).err
    assert "beside a launch command" in err
    err = run(capsys, ["explain", "--vram", "32G"], code=2).err
    assert "--model" in err and "sglang.launch_server" in err
    err = run(
        capsys,
        [
            "explain",
            "--",
            "python",
            "-m",
            "sglang.launch_server",
            "--model",
            "/nowhere/model",
            "--kt-weight-path",
            "/w",
            "--kt-num-gpu-experts",
            "0",
        ],
        code=2,
    ).err
    assert "--model NAME" in err


def test_an_mla_pick_and_its_attention_backend_explain_back_to_the_same_prediction(capsys):
    """DeepSeek-V3 on long prompts: the search chooses the attention backend (the latent form on
    triton, one expanded shot on flashinfer: docs/cost-model.md#mla-prefill-forms); the command it
    prints carries it and explains back to the same prediction. The same command left to SGLang's
    pick runs fa3 on the H200 (the same forms as flashinfer) and says so; on triton it is slower."""
    common = ["--vram", "141G", "--profile", MEASURED, "--host-ram", "1T", "--workload", "long-context"]
    s = json.loads(
        run(
            capsys,
            [
                "search",
                "-m",
                "deepseek-v3",
                *common,
                "--trials",
                "60",
                "--seed",
                "1",
                "--storage",
                ":memory:",
                "--json",
            ],
        ).out
    )
    argv = s["command"]
    backend = argv[argv.index("--attention-backend") + 1]
    assert backend == (s["pick"]["flags"]["attention_backend"] or "triton")
    back = json.loads(run(capsys, ["explain", *common, "--no-compare", "--json", "--", *argv]).out)
    assert back["evaluation"]["predicted"] == s["pick"]["predicted"]

    def explained(words):
        doc = json.loads(run(capsys, ["explain", *common, "--no-compare", "--json", "--", *words]).out)
        return doc["evaluation"], doc["launch"]["assumed"]

    i = argv.index("--attention-backend")
    unset, said = explained(argv[:i] + argv[i + 2 :])
    assert unset["flags"]["attention_backend"] == "fa3" and any("SGLang picks fa3" in n for n in said)
    tri, _ = explained(argv[:i] + ["--attention-backend", "triton"] + argv[i + 2 :])
    fi, _ = explained(argv[:i] + ["--attention-backend", "flashinfer"] + argv[i + 2 :])
    assert unset["predicted"]["mean_prefill_ms"] == fi["predicted"]["mean_prefill_ms"]
    assert tri["predicted"]["mean_prefill_ms"] > fi["predicted"]["mean_prefill_ms"]


def test_explain_takes_an_attention_backend_and_refuses_one_sglang_does_not(capsys):
    flags = ["explain", "-m", "deepseek-v3", "--vram", "141G", "--profile", MEASURED, "--host-ram", "1T"]
    flags += ["--workload", "long-context", "--gpu-experts", "4", "--chunk", "16384", "--threshold", "2048"]
    flags += ["--max-total-tokens", "140000", "--json"]

    def mean_prefill(extra):
        return json.loads(run(capsys, flags + extra).out)["evaluation"]["predicted"]["mean_prefill_ms"]

    assert mean_prefill(["--attention-backend", "flashinfer"]) < mean_prefill([])  # triton's latent form
    assert mean_prefill(["--attention-backend", "triton"]) == mean_prefill([])
    err = run(capsys, flags + ["--attention-backend", "flash"], code=2).err
    assert "'flash' is not an attention backend SGLang takes" in err and "Traceback" not in err
    bad = DOC_COMMAND.strip() + " --attention-backend flash"
    err = run(capsys, ["explain", "-m", "minimax-m2", "--profile", MEASURED, "--json", "--command", bad], code=2).err
    assert "is not an attention backend SGLang takes" in err
