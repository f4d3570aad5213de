"""kt-kernel's extension module, imported once per process, and a guard that keeps its C++ printf
output off stdout (it would corrupt `--json` output)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator


@dataclass(frozen=True)
class KtKernel:
    """The imported extension: module, the CPU variant it loaded, and its version."""

    ext: Any
    variant: str
    version: str

    @property
    def backend(self) -> str:
        return f"kt-kernel:{self.variant}"


_KT: KtKernel | None = None
_KT_ERROR: str | None = None


def load_kt_kernel() -> KtKernel | None:
    """Import kt-kernel once; None (reason in `kt_kernel_error()`) if it is not importable."""
    global _KT, _KT_ERROR
    if _KT is not None or _KT_ERROR is not None:
        return _KT
    try:
        with quiet_stdout():
            import kt_kernel
        _KT = KtKernel(
            ext=kt_kernel.kt_kernel_ext,
            variant=str(kt_kernel.__cpu_variant__),
            version=str(getattr(kt_kernel, "__version__", "")),
        )
    except Exception as e:  # ImportError, or its variant check raising RuntimeError
        _KT_ERROR = f"{type(e).__name__}: {e}"
    return _KT


def kt_kernel_error() -> str | None:
    return _KT_ERROR


_FLAGS: frozenset[str] | None = None


def host_cpu_flags() -> frozenset[str]:
    """This host's CPU flags as /proc/cpuinfo names them (its first processor's `flags` line; empty
    where there is none): what a kt-kernel class needs beyond its build (`KT_CLASS_PREFERENCE`)."""
    global _FLAGS
    if _FLAGS is None:
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        line = next((ln for ln in text.splitlines() if ln.split(":", 1)[0].strip() == "flags"), "")
        _FLAGS = frozenset(line.split(":", 1)[1].split()) if ":" in line else frozenset()
    return _FLAGS


def _libc_fflush() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass


@contextlib.contextmanager
def quiet_stdout(to_stderr: bool = False) -> Iterator[None]:
    """Send file descriptor 1 to /dev/null (or to stderr) for the block: kt-kernel's C++ prints
    construction and pool messages with printf."""
    try:
        sys.stdout.flush()
    except Exception:
        pass
    _libc_fflush()
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    devnull = os.dup(2) if to_stderr else os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        _libc_fflush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
