"""`kttune paths` and `kttune calibrate`: bad input is one line and exit 2; a small CPU run and a
calibration round trip through the commands."""

from __future__ import annotations

import json

import pytest

from kttune.cli import main
from tests.cli.test_errors import assert_one_line_error, run


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["paths", "qwen3-30b-a3b", "--force", "sideways", "--small"], "sideways"),
        (["paths", "qwen3-30b-a3b", "--gpu-experts", "999", "--small"], "999"),
        (["paths", "qwen3-30b-a3b", "--chunks", "4k", "--small"], "4k"),
        (["paths", "no-such-model", "--small"], "no-such-model"),
        (["paths", "qwen3-30b-a3b", "--method", "AMXINT4", "--force", "layerwise", "--small"], "layerwise"),
        (["paths", "qwen3-30b-a3b", "--repeats", "0", "--small"], "--repeats 0"),
        (["paths", "qwen3-30b-a3b", "--cpu-max-tokens", "0", "--small"], "--cpu-max-tokens"),
        (["calibrate", "/nonexistent.json", "--out", "/tmp/x.json"], "does not exist"),
    ],
)
def test_bad_input_is_one_line(capsys, argv, needle):
    code, _, err = run(capsys, argv)
    assert_one_line_error(code, err, needle)


def test_small_run_then_calibrate(capsys, tmp_path):
    out = tmp_path / "r.json"
    code = main(
        [
            "paths",
            "qwen3-30b-a3b",
            "--small",
            "--layers",
            "1",
            "--chunks",
            "64",
            "--prompts",
            "100",
            "--cpuinfer",
            "1",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    assert code in (0, None)
    capsys.readouterr()
    d = json.loads(out.read_text())
    [r] = d["runs"]
    assert [f["path"] for f in r["forwards"]] == ["layerwise", "hybrid"]
    # small shapes have no predictions to fit: calibrate says so
    code, _, err = run(capsys, ["calibrate", str(out), "--out", str(tmp_path / "p.json")])
    assert_one_line_error(code, err, "no predicted forwards")


def test_cpu_max_tokens_caps_the_hybrid_forwards(capsys, tmp_path):
    """kt-kernel's max_len is the largest hybrid forward: a sweep past it times the layerwise side
    and skips the hybrid one with the reason, and a size within it runs both."""
    out = tmp_path / "r.json"
    argv = ["paths", "qwen3-30b-a3b", "--small", "--layers", "1", "--sweep", "64,128", "--cpuinfer", "1"]
    argv += ["--device", "cpu", "--repeats", "1", "--cpu-max-tokens", "64", "--out", str(out)]
    code = main(argv)
    assert code in (0, None)
    capsys.readouterr()
    d = json.loads(out.read_text())
    ran = {(r["forced_path"], r["forwards"][0]["tokens"]) for r in d["runs"]}
    assert {("hybrid", 64), ("layerwise", 64), ("layerwise", 128)} <= ran
    assert ("hybrid", 128) not in ran
    assert any("max_len 64" in s["reason"] for s in d["skipped"])
