"""`kttune tune` through the CLI: the CPU variant end to end (--json, the report files, the tables at
80 and 60 columns), the answer without a GPU, and one-line errors on bad input."""

from __future__ import annotations

import json

import pytest

from kttune.cli import main

SHIPPED = "h200-pcie5-xeon-amx-16c"


def test_tune_cpu_variant_end_to_end(tmp_path, capsys, monkeypatch):
    from rich.console import Console

    from kttune.emit import tune_report
    from kttune.emit.terminal import fits

    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(tmp_path / "cache"))
    wl = tmp_path / "wl.json"
    wl.write_text(
        json.dumps({"prompt_tokens": [300, 700, 1500], "weights": [1, 1, 1], "output_tokens": 16, "concurrency": 1})
    )
    code = main(
        [
            "tune",
            "-m",
            "qwen3-30b-a3b",
            "--vram",
            "32G",
            "-w",
            str(wl),
            "--evaluator",
            "runner-cpu",
            "--profile",
            SHIPPED,
            "--chunks",
            "512,1024",
            "--report",
            str(tmp_path / "rep"),
            "--json",
        ]
    )
    cap = capsys.readouterr()
    assert code == 0, cap.err
    doc = json.loads(cap.out)
    assert doc["mode"] == "measured" and doc["pick"]["chunked_prefill_size"] in (512, 1024)
    assert "--kt-num-gpu-experts" in doc["command"] and doc["output_check"]["agree"]
    assert {r["role"] for r in doc["verification"]} >= {"pick", "baseline"}
    assert json.loads((tmp_path / "rep" / "tune.json").read_text())["pick"] == doc["pick"]
    md = (tmp_path / "rep" / "tune.md").read_text()
    assert "| configuration | role |" in md and "python -m sglang.launch_server" in md
    assert "verification" in cap.err and "sglang-kt launch command" in cap.err  # the report, on stderr under --json
    for width in (80, 60):
        c = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)
        tables = []
        real = c.print

        def keep(*objs, **kw):
            tables.extend(o for o in objs if hasattr(o, "columns"))
            return real(*objs, **kw)

        c.print = keep
        tune_report.render(c, doc)
        assert tables and all(fits(t, width) for t in tables), width


def test_tune_without_a_gpu_answers_from_the_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(tmp_path))
    code = main(["tune", "-m", "qwen3-30b-a3b", "--vram", "32G", "--profile", SHIPPED, "--json"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    doc = json.loads(cap.out)
    assert doc["mode"] == "model" and "no GPU here" in doc["notes"][0] and doc["command"]
    assert "no GPU here" in " ".join(cap.err.split())


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--evaluator", "oracle"], "unknown evaluator"),
        (["--budget", "ten"], "--budget"),
        (["--repeats", "1"], "--repeats 1"),
        (["--probe", "sometimes"], "--probe"),
        (["--vram", "lots"], "--vram"),
    ],
)
def test_bad_tune_options_are_one_line(capsys, extra, needle):
    code = main(["tune", "-m", "qwen3-30b-a3b", "--vram", "32G"] + extra)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err
