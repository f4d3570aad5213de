"""Shared test setup: GPU tests are marked `gpu` and skipped where CUDA is absent; kt-kernel tests
are marked `kt` and skipped where kt-kernel cannot be imported."""

from __future__ import annotations

import importlib.util
import os

import pytest
from hypothesis import settings

# No wall-clock assertions in tests: Hypothesis's per-example deadline is one (a first example that
# imports scipy took 0.56 s against its 0.2 s default), so every property test runs without it.
settings.register_profile("kttune", deadline=None)
settings.load_profile("kttune")


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Without a GPU, run the Triton kernels through Triton's CPU interpreter (slow, but it checks their
# logic); set before any test module imports triton, since @triton.jit reads it at decoration.
if not _has_cuda() and importlib.util.find_spec("triton") is not None:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _has_kt() -> bool:
    return importlib.util.find_spec("kt_kernel") is not None


def pytest_collection_modifyitems(config, items):
    # Markers, not keywords: an item's keywords also hold the names of its directories, so a checkout
    # in a folder named `kt` or `gpu` would skip every test (tests/test_conftest_markers.py).
    cuda = _has_cuda()
    kt = _has_kt()
    for item in items:
        if item.get_closest_marker("gpu") is not None and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
        if item.get_closest_marker("kt") is not None and not kt:
            item.add_marker(pytest.mark.skip(reason="needs kt-kernel (pip install --no-deps kt-kernel==0.7.2)"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own kttune cache dir, so no test reads a profile or study of another."""
    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(tmp_path / "kttune-cache"))
    yield
