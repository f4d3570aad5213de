"""Triton, where it is installed: the one import the Triton kernel modules share, and whether their
kernels can run. torch CPU builds ship without Triton; with `TRITON_INTERPRET=1` Triton runs kernels
on CPU tensors through its interpreter, which is how CI without a GPU checks them."""

from __future__ import annotations

import os

import torch

try:  # Triton is optional: torch CPU builds ship without it.
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except Exception:  # pragma: no cover - depends on the install
    triton = None
    tl = None
    HAVE_TRITON = False


def available(device: str = "cuda") -> bool:
    """True when Triton kernels can run on `device` ("cuda", or "cpu" under TRITON_INTERPRET=1)."""
    if not HAVE_TRITON:
        return False
    if device == "cpu":
        return os.environ.get("TRITON_INTERPRET") == "1"
    return torch.cuda.is_available()
