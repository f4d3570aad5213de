"""`kttune profile derive`: a measured box planned with other GPUs, then searched with; bad input
is one line and exit code 2."""

from __future__ import annotations

import json

import pytest

from kttune.cli import main
from kttune.hw.profile import load_profile


def run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_derive_then_search_with_the_derived_profile(capsys, tmp_path):
    out = tmp_path / "2x5090.json"
    code, stdout, _ = run(
        capsys,
        ["profile", "derive", "h200-pcie5-xeon-amx-16c", "--gpu", "rtx5090", "--gpus", "2", "-o", str(out), "--json"],
    )
    assert code == 0
    summary = json.loads(stdout)
    assert summary["labels"]["scaled"] > 0 and summary["labels"]["measured"] > 0
    p = load_profile(out)
    assert len(p.inventory.gpus) == 2 and "5090" in p.inventory.gpus[0].name
    code, stdout, err = run(
        capsys,
        [
            "search",
            "-m",
            "qwen3-30b-a3b",
            "--vram",
            "30G",
            "--gpus",
            "2",
            "--profile",
            str(out),
            "--trials",
            "30",
            "--seed",
            "1",
            "--storage",
            str(tmp_path / "s.journal"),
            "--json",
        ],
    )
    assert code == 0, err
    res = json.loads(stdout)
    assert "5090" in res["profile"]["machine"]


def test_derive_another_cpu(capsys, tmp_path):
    out = tmp_path / "cpu.json"
    code, _, err = run(
        capsys,
        [
            "profile",
            "derive",
            "h200-pcie5-xeon-amx-16c",
            "--cpu-cores",
            "64",
            "--numa",
            "2",
            "--mem-channels",
            "16",
            "-o",
            str(out),
        ],
    )
    assert code == 0, err
    p = load_profile(out)
    assert p.inventory.cpu.physical_cores == 64 and len(p.inventory.cpu.numa_nodes) == 2
    assert {c.params["threads"] for c in p.curves_of("cpu_moe")} >= {63, 64}


def test_another_vendors_cpu_is_derived_as_a_datasheet_guess(capsys, tmp_path):
    out = tmp_path / "epyc.json"
    argv = ["profile", "derive", "h200-pcie5-xeon-amx-16c", "--cpu-cores", "64", "--cpu-isa", "avx512"]
    code, text, err = run(capsys, [*argv, "--cpu-vendor", "amd", "--numa", "2", "-o", str(out)])
    assert code == 0, err
    p = load_profile(out)
    assert p.inventory.cpu.vendor == "AuthenticAMD"
    assert {c.params["label"] for c in p.curves if c.kind in ("cpu_moe", "stage_a_write")} == {"datasheet"}
    assert "CPU vendor GenuineIntel -> AuthenticAMD" in text


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--gpu", "rtx9999"], "unknown gpu"),
        (["--gpus", "0"], "--gpus 0"),
        (["--cpu-cores", "12", "--numa", "5"], "--numa 5"),
        (["--cpu-isa", "amx"], "--cpu-cores"),
        (["--cpu-cores", "32", "--cpu-isa", "sse"], "--cpu-isa"),
        (["--cpu-cores", "32", "--cpu-vendor", "via"], "--cpu-vendor"),
        (["--cpu-vendor", "amd"], "--cpu-cores"),
        ([], "nothing to change"),
    ],
)
def test_bad_derive_input_is_one_line(capsys, tmp_path, argv, needle):
    code, _, err = run(capsys, ["profile", "derive", "h200-pcie5-xeon-amx-16c", "-o", str(tmp_path / "x.json"), *argv])
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle.lower() in lines[0].lower(), err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["profile", "derive"], "SOURCE"),
        (["profile", "derive", "h200-pcie5-xeon-amx-16c", "--gpu", "rtx5090"], "--out"),
    ],
)
def test_a_missing_source_or_out_is_one_line(capsys, argv, needle):
    code, _, err = run(capsys, argv)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], err


def test_the_gpu_list_needs_no_source_and_fits_the_terminal(capsys, monkeypatch):
    from kttune.hw.gpu_table import GPUS

    monkeypatch.setenv("COLUMNS", "60")
    code, out, err = run(capsys, ["profile", "derive", "--gpu", "list"])
    assert code == 0, err
    assert max(len(ln) for ln in out.splitlines()) <= 60
    assert all(key in out for key in GPUS)
    code, out, _ = run(capsys, ["profile", "derive", "--gpu", "list", "--json"])
    doc = json.loads(out)
    assert doc["schema"] == "kttune.gpus/1" and [g["key"] for g in doc["gpus"]] == list(GPUS)
