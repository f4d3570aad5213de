"""`kttune validate` end to end against the stand-in server (sglang-kt cannot run here)."""

from __future__ import annotations

import json

from kttune.cli import main
from kttune.hw.profile import load_profile

BASE = [
    "validate",
    "-m",
    "kimi-k2-thinking",
    "--vram",
    "140G",
    "--gpu-experts",
    "2",
    "--chunk",
    "4096",
    "--threshold",
    "2048",
    "--max-total-tokens",
    "65536",
    "--profile",
    "h200-pcie5-xeon-amx-16c",
    "--repeats",
    "1",
    "-w",
    "chat",
]


def test_validate_writes_corrections_into_the_profile(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KTTUNE_STANDIN_STARTUP_S", "0.2")
    out = tmp_path / "calibrated.json"
    code = main(
        BASE
        + ["--server-module", "kttune.validate.standin", "--out", str(out), "--log", str(tmp_path / "s.log"), "--json"]
    )
    cap = capsys.readouterr()
    assert code == 0, cap.err
    doc = json.loads(cap.out)
    assert doc["ok"] and doc["prompt_lengths"][0] == 4096 and doc["measurements"][0]["server_prompt_tokens"] == 4096
    assert "--kt-gpu-prefill-token-threshold" in doc["server_argv"] and doc["server_argv"][-2:] == [
        "--host",
        "127.0.0.1",
    ]
    cal = load_profile(out).calibration
    assert {e["path"] for e in cal} == {"hybrid", "layerwise", "layerwise:load", "layerwise:compute"}
    assert {e["source"] for e in cal} == {"server"} and {e["method"] for e in cal} == {"RAWINT4"}
    assert doc["profile_written"] == str(out)


def test_oom_exits_1_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KTTUNE_STANDIN_MODE", "oom")
    monkeypatch.setenv("KTTUNE_STANDIN_STARTUP_S", "0.2")
    out = tmp_path / "calibrated.json"
    code = main(
        BASE
        + ["--server-module", "kttune.validate.standin", "--out", str(out), "--log", str(tmp_path / "s.log"), "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["failure"]["kind"] == "oom" and not out.exists()


def test_without_sglang_kt_one_line_error(tmp_path, capsys):
    code = main(BASE + ["--model-path", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "cannot import sglang" in err and "--python" in err


def test_real_server_needs_the_model_files(capsys):
    code = main(BASE)
    err = capsys.readouterr().err
    assert code == 2 and "--model-path" in err
