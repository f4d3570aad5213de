"""`kttune search --chunks` and the one margin rule shared by `search` and `explain --vram-margin`."""

from __future__ import annotations

import json

from kttune.cli import main
from kttune.memory.vram import usable_vram_bytes
from kttune.units import GIB


def run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_search_takes_the_users_chunks(capsys, tmp_path):
    code, out, err = run(
        capsys,
        [
            "search",
            "-m",
            "qwen3-30b-a3b",
            "--vram",
            "24G",
            "--chunks",
            "8k,16384",
            "--trials",
            "20",
            "--seed",
            "1",
            "--storage",
            str(tmp_path / "s.journal"),
            "--json",
        ],
    )
    assert code == 0, err
    assert json.loads(out)["pick"]["flags"]["chunked_prefill_size"] in (8192, 16384)


def test_bad_chunks_are_one_line(capsys, tmp_path):
    for bad, needle in (("1000", "multiple of 64"), ("65536", "context")):
        code, _, err = run(
            capsys,
            [
                "search",
                "-m",
                "qwen3-30b-a3b",
                "--vram",
                "24G",
                "--chunks",
                bad,
                "--trials",
                "5",
                "--storage",
                str(tmp_path / "s.journal"),
            ],
        )
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and needle in lines[0], err


def test_explain_applies_the_same_margin(capsys):
    args = [
        "explain",
        "-m",
        "qwen3-30b-a3b",
        "--vram",
        "12G",
        "--gpu-experts",
        "2",
        "--max-total-tokens",
        "16384",
        "--json",
    ]
    vram = {}
    for margin in (0.0, 0.45):
        code, out, err = run(capsys, args + ["--vram-margin", str(margin)])
        assert code in (0, 1), err
        d = json.loads(out)
        assert d["budget"]["vram_margin"] == margin
        vram[margin] = d["evaluation"]["constraints"]["vram"]  # GiB over the usable budget
    # the usable budget shrinks by exactly the margin's share (kttune.memory.vram.usable_vram_bytes)
    expected = (usable_vram_bytes(12 * GIB, 0.0) - usable_vram_bytes(12 * GIB, 0.45)) / GIB
    assert abs((vram[0.45] - vram[0.0]) - expected) < 1e-6
