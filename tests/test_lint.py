"""The code passes ruff ([tool.ruff] in pyproject.toml): its lint rules and its formatting. Part of
the test command, so `.ci/run` and a contributor's `pytest` both hold the tree to it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff(argv):
    pytest.importorskip("ruff", reason="ruff comes with the test extra: pip install -e '.[test]'")
    done = subprocess.run([sys.executable, "-m", "ruff", *argv], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, (
        f"ruff {' '.join(argv)}:\n{done.stdout[-4000:]}{done.stderr[-2000:]}\nfix: ruff format . && ruff check --fix ."
    )
