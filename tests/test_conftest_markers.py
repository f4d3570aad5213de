"""tests/conftest.py skips by marker only: a checkout in a folder named `kt` (or `gpu`) where
kt-kernel does not import runs its unmarked tests. Checked by running pytest on a small tree laid
out so, with this conftest and kt-kernel made unimportable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CONFTEST = Path(__file__).with_name("conftest.py")

SAMPLE = """
import pytest

def test_plain():
    pass

@pytest.mark.kt
def test_needs_kt():
    pass

@pytest.mark.gpu
def test_needs_gpu():
    pass

@pytest.mark.parametrize("n", [1])
class TestMarkedClass:
    pytestmark = pytest.mark.kt

    def test_inherits_the_class_marker(self, n):
        pass
"""


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def test_a_folder_named_kt_or_gpu_skips_nothing_unmarked(tmp_path):
    root = tmp_path / "kt"  # the checkout's folder
    (root / "gpu").mkdir(parents=True)  # and a test directory named like the other marker
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: GPU\n    kt: kt-kernel\n")
    (root / "conftest.py").write_text(
        CONFTEST.read_text() + "\nimport sys\nsys.modules['kt_kernel'] = None  # not importable\n"
    )
    (root / "gpu" / "test_sample.py").write_text(SAMPLE)
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--strict-markers"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "test_sample.py::test_plain PASSED" in out
    assert "test_sample.py::test_needs_kt SKIPPED" in out
    assert "test_inherits_the_class_marker[1] SKIPPED" in out
    assert ("test_sample.py::test_needs_gpu PASSED" if _has_cuda() else "test_sample.py::test_needs_gpu SKIPPED") in out
