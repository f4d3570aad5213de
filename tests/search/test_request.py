"""A request is built without Optuna: the commands that measure or explain (`probe`, `paths`, the
inputs every command reads) do not import the study, so they start without Optuna's import cost
and run where only the measuring dependencies are installed (the GPU box's trimmed site,
benchmarks/device_common.sh)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kttune.search.request import tp_problem
from kttune.spec.loader import load_model


@pytest.mark.parametrize(
    "module", ["kttune.search.request", "kttune.app.inputs", "kttune.app.probing", "kttune.app.paths"]
)
def test_measuring_modules_do_not_import_optuna(module):
    code = f"import sys, {module}; print('optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_tp_problem_follows_sglangs_sharding_rules():
    qwen = load_model("qwen3-30b-a3b")  # 32 attention heads, 4 KV heads, expert width 768
    assert tp_problem(qwen, "BF16", 2) is None
    assert tp_problem(qwen, "BF16", 8) is None  # 4 KV heads replicated over 8 ranks, width 96
    assert "attention heads" in tp_problem(qwen, "BF16", 3)
    assert tp_problem(qwen, "FP8", 2) is None  # 384 = 3 blocks of 128
    for tp in (4, 8):  # 192 and 96 wide: not whole 128-wide blocks
        assert "multiple of 128" in tp_problem(qwen, "FP8", tp)
