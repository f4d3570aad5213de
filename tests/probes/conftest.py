"""Fixtures of the probe tests."""

from __future__ import annotations

import pytest

from kttune.kernels.kt_ext import kt_kernel_error, load_kt_kernel


@pytest.fixture(scope="module")
def kt():
    """kt-kernel's extension as the probes load it; the test is skipped where it does not import."""
    k = load_kt_kernel()
    if k is None:
        pytest.skip(f"kt-kernel not importable: {kt_kernel_error()}")
    return k
