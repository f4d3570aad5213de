"""Every bad input the CLI rejects: one line naming the problem and the fix, exit code 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kttune.cli import main
from kttune.hw.registry import load_shipped
from kttune.hw.profile import profile_to_dict
from kttune.units import GIB

SEARCH = ["search", "--trials", "20", "--storage"]


def run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code, err, *needles, exit_code=2):
    assert code == exit_code
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    for n in needles:
        assert n.lower() in lines[0].lower(), lines[0]


def search_args(tmp_path, *extra):
    return ["search", "--trials", "20", "--storage", str(tmp_path / "s.journal"), *extra]


def test_unknown_model_suggests_close_names(capsys, tmp_path):
    code, _, err = run(capsys, search_args(tmp_path, "--model", "qwen3-30b-a3", "--vram", "32G"))
    assert_one_line_error(code, err, "qwen3-30b-a3", "qwen3-30b-a3b", "kttune models")


def test_directory_without_config_json(capsys, tmp_path):
    d = tmp_path / "empty-model"
    d.mkdir()
    code, _, err = run(capsys, search_args(tmp_path, "--model", str(d), "--vram", "32G"))
    assert_one_line_error(code, err, "config.json")


def test_malformed_config_json(capsys, tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "qwen3_moe",\n "hidden_size": }')
    code, _, err = run(capsys, search_args(tmp_path, "--model", str(d), "--vram", "32G"))
    assert_one_line_error(code, err, "json", "line 2")


def test_dense_model(capsys, tmp_path):
    d = tmp_path / "llama"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
                "max_position_embeddings": 131072,
            }
        )
    )
    code, _, err = run(capsys, search_args(tmp_path, "--model", str(d), "--vram", "32G"))
    assert_one_line_error(code, err, "dense")


@pytest.mark.parametrize("vram", ["32X", "lots", "-4G", "0G", ""])
def test_unparseable_vram(capsys, tmp_path, vram):
    code, _, err = run(capsys, search_args(tmp_path, "--model", "qwen3-30b-a3b", "--vram", vram))
    assert_one_line_error(code, err, "--vram", "32G")


@pytest.mark.parametrize("vram,gib", [("32G", 32), ("32GiB", 32), ("24GB", 24), ("32000M", 31.25), ("48", 48)])
def test_accepted_vram_spellings(vram, gib):
    from kttune.units import parse_size_bytes

    assert parse_size_bytes(vram) == int(gib * GIB)


def test_budget_too_small_prints_the_minimum_and_breakdown(capsys, tmp_path):
    code, _, err = run(capsys, search_args(tmp_path, "--model", "qwen3-235b-a22b", "--vram", "8G", "--host-ram", "1T"))
    # nothing fits: the answer is "no" (exit 1), said in one line with the least it needs
    assert_one_line_error(code, err, "at least", "GiB per GPU", "non expert weights", "kv cache", "--vram", exit_code=1)


def test_unknown_method(capsys, tmp_path):
    code, _, err = run(
        capsys, search_args(tmp_path, "--model", "qwen3-30b-a3b", "--vram", "32G", "--kt-method", "INT3")
    )
    assert_one_line_error(code, err, "INT3", "AMXINT4")


@pytest.mark.parametrize("flag,value", [("--gpus", "0"), ("--gpus", "-2"), ("--trials", "0"), ("--trials", "-5")])
def test_zero_or_negative_counts(capsys, tmp_path, flag, value):
    code, _, err = run(capsys, search_args(tmp_path, "--model", "qwen3-30b-a3b", "--vram", "32G", flag, value))
    assert_one_line_error(code, err, flag)


@pytest.mark.parametrize(
    "flag,value", [("--gpu-experts", "-1"), ("--chunk", "0"), ("--max-total-tokens", "-10"), ("--threshold", "-1")]
)
def test_explain_rejects_negative_counts(capsys, flag, value):
    code, _, err = run(
        capsys, ["explain", "--model", "qwen3-30b-a3b", "--vram", "32G", "--gpu-experts", "4", flag, value]
    )
    assert_one_line_error(code, err, flag)


def test_explain_rejects_a_threshold_for_amx(capsys):
    code, _, err = run(
        capsys,
        [
            "explain",
            "--model",
            "deepseek-v3",
            "--kt-method",
            "AMXINT4",
            "--vram",
            "80G",
            "--host-ram",
            "1T",
            "--gpu-experts",
            "1",
            "--threshold",
            "4096",
        ],
    )
    assert_one_line_error(code, err, "AMXINT4", "--threshold 0")


def test_profile_of_another_format_version(capsys, tmp_path):
    d = profile_to_dict(load_shipped("datasheet-h200-pcie5-xeon-amx-16c"))
    d["version"] = 99
    f = tmp_path / "old.json"
    f.write_text(json.dumps(d))
    code, _, err = run(capsys, search_args(tmp_path, "--model", "qwen3-30b-a3b", "--vram", "32G", "--profile", str(f)))
    assert_one_line_error(code, err, "version 99", "kttune probe")


def test_profile_that_is_not_json(capsys, tmp_path):
    f = tmp_path / "p.json"
    f.write_text("not json")
    code, _, err = run(capsys, search_args(tmp_path, "--model", "qwen3-30b-a3b", "--vram", "32G", "--profile", str(f)))
    assert_one_line_error(code, err, "not valid JSON")


def test_unknown_profile_name(capsys, tmp_path):
    code, _, err = run(
        capsys, search_args(tmp_path, "--model", "qwen3-30b-a3b", "--vram", "32G", "--profile", "h100-box")
    )
    assert_one_line_error(code, err, "h100-box", "datasheet-h200")


def test_console_script_exit_code_and_no_traceback(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "kttune.cli", "search", "--model", "nope-model", "--vram", "32G"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "argv,needles",
    [
        (["search", "--model", "deepseek-v3", "--vram", "80G", "--tp", "2"], ("--tp", "--gpus", "--help")),
        (["search", "--model", "deepseek-v3", "--vram", "80G", "--trials", "x"], ("--trials", "--help")),
        (["frobnicate"], ("frobnicate", "kttune --help")),
    ],
)
def test_usage_errors_are_one_line(capsys, argv, needles):
    # click's usage errors (typer vendors click as typer._click since 0.24) get the same one-line form
    assert_one_line_error(*run(capsys, argv)[::2], *needles)


def test_unknown_option_through_the_console_entry(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "kttune.cli", "probe", "--bogus"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1 and "--bogus" in p.stderr
