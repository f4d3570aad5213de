"""The CLI contract beyond bad input: exit code 1 for "does not fit", the loader's and the
workload's notes in the report and the JSON, the default storage in an unusable place, probe's
refusals before measuring, and a measured profile that is never lost."""

from __future__ import annotations

import json
from pathlib import Path

from kttune.cli import main
from kttune.hw.profile import save_profile_with_fallback
from kttune.hw.registry import load_shipped
from kttune.spec.catalog import catalog_config

PROFILE = "datasheet-h200-pcie5-xeon-amx-16c"


def run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_explain_that_does_not_fit_exits_1_with_the_report(capsys):
    code, out, err = run(
        capsys, ["explain", "--model", "qwen3-30b-a3b", "--vram", "8G", "--gpu-experts", "0", "--profile", PROFILE]
    )
    assert code == 1 and "does not fit" in out and "Traceback" not in err


def test_explain_json_that_does_not_fit_exits_1_with_json(capsys):
    code, out, _ = run(
        capsys,
        ["explain", "--model", "qwen3-30b-a3b", "--vram", "8G", "--gpu-experts", "0", "--profile", PROFILE, "--json"],
    )
    assert code == 1 and json.loads(out)["evaluation"]["feasible"] is False


def _model_dir(tmp_path: Path, **changes) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    cfg = {k: v for k, v in catalog_config("qwen3-30b-a3b").items() if not k.startswith("_")}
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_loader_and_workload_notes_reach_report_and_json(capsys, tmp_path):
    """An untested family, a method that does not match the checkpoint, prompts longer than the
    context: each said in the report and listed in the JSON notes."""
    d = _model_dir(tmp_path, model_type="brand_new_moe", max_position_embeddings=8192)
    wl = tmp_path / "long.json"
    wl.write_text(json.dumps({"prompt_tokens": [1000, 1_000_000], "weights": [0.5, 0.5], "output_tokens": 256}))
    code, out, err = run(
        capsys,
        [
            "search",
            "--model",
            str(d),
            "--vram",
            "48G",
            "--profile",
            PROFILE,
            "--trials",
            "20",
            "--storage",
            str(tmp_path / "s.journal"),
            "--kt-method",
            "MXFP4",
            "--workload",
            str(wl),
            "--json",
        ],
    )
    assert code == 0, err
    notes = json.loads(out)["notes"]
    for needle in ("not one kttune was tested on", "--kt-method MXFP4 reads", "clipped to 7,936 tokens"):
        assert any(needle in n for n in notes), (needle, notes)
        assert needle in " ".join(err.split()), needle


def test_default_storage_in_an_unusable_place_is_one_line(capsys, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(blocker / "kttune"))
    code, _, err = run(
        capsys, ["search", "--model", "qwen3-30b-a3b", "--vram", "32G", "--profile", PROFILE, "--trials", "5"]
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "KTTUNE_CACHE_DIR" in lines[0], err
    assert blocker.read_text() == "x"


def test_probe_refuses_before_measuring(capsys, tmp_path):
    for argv, needle in (
        (["probe", "--threads", "999"], "logical CPUs"),
        (["probe", "--threads", "0"], "outside 1.."),
        (["probe", "--out", str(tmp_path)], "is a directory"),
        (["probe", "--out", str(tmp_path / "f" / "p.json")], None),
    ):
        if needle is None:
            (tmp_path / "f").write_text("mine")
            needle = "which is a file"
        code, _, err = run(capsys, argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and needle in lines[0], err
    assert (tmp_path / "f").read_text() == "mine"


def test_a_measured_profile_is_never_lost(tmp_path):
    p = load_shipped(PROFILE)
    (tmp_path / "file").write_text("x")
    bad = [tmp_path, tmp_path / "file" / "p.json"]  # a directory, a path under a file
    written, problems = save_profile_with_fallback(p, bad, [tmp_path / "fallback"])
    assert written == [tmp_path / "fallback" / f"kttune-profile-{p.fingerprint or 'unknown'}.json"]
    assert json.loads(written[0].read_text())["format"] == "kttune-hardware-profile"
    assert len(problems) == 2 and all(str(written[0]) in m for m in problems)
    # the fallback itself refused: the temp dir takes it
    written, problems = save_profile_with_fallback(p, bad, [tmp_path / "file" / "no"])
    assert written and written[0].is_file() and str(written[0]) in problems[0]
    written[0].unlink()
