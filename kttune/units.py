"""Parsing and printing of sizes. Binary units (GiB) are what NVML and torch report; SGLang logs GB
as GiB too. `32G`, `32GB` and `32GiB` all mean 32 GiB here, as in nvidia-smi and SGLang logs."""

from __future__ import annotations

import re

from kttune.bounds import DURATION_SECONDS
from kttune.errors import UserError

GIB = 1024**3
MIB = 1024**2
GB = 10**9  # decimal: checkpoint sizes and PCIe traffic as vendors quote them

_UNITS = {
    "": GIB,  # a bare number is GiB: `--vram 24`
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": MIB,
    "mb": MIB,
    "mib": MIB,
    "g": GIB,
    "gb": GIB,
    "gib": GIB,
    "t": 1024**4,
    "tb": 1024**4,
    "tib": 1024**4,
}
_MAX_SIZE_BYTES = 1 << 60  # an exbibyte: past any machine; the commands' own bounds are tighter
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size_bytes(text: str, what: str = "--vram") -> int:
    """`32G`, `32GiB`, `24GB`, `32000M`, `80` (GiB) -> bytes. Raises UserError on anything else."""
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise UserError(
            f"cannot read {what} {text!r} as a size",
            "write it like 32G, 32GiB, 24GB or 32000M",
        )
    value = float(m.group(1)) * _UNITS[unit]
    if value <= 0:
        raise UserError(f"{what} {text!r} must be positive", "give a size such as 32G or 24GB")
    if value > _MAX_SIZE_BYTES:  # also an overflow to infinity: 400 nines
        raise UserError(f"{what} {str(text)[:40]!r} is larger than any memory", "give a size such as 32G or 24GB")
    return int(value)


_DURATION_PART = r"([0-9]*\.?[0-9]+)\s*(ms|min|h|m|s)?"
_DURATION_RE = re.compile(rf"^\s*(?:{_DURATION_PART}\s*)+$", re.IGNORECASE)
_DURATION_S = {"s": 1.0, "ms": 1e-3, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration_s(text: str, what: str, bare_unit: str = "s") -> float:
    """`10s`, `150ms`, `2m`, `1.5h`, `1h30m` -> seconds; a bare number is in `bare_unit` ("s" or
    "ms"). Only the last part of a compound may omit its unit (`1h30` is not accepted)."""
    t = str(text)
    parts = re.findall(_DURATION_PART, t, re.IGNORECASE) if _DURATION_RE.match(t) else []
    if not parts or any(not unit for _, unit in parts[:-1]) or (len(parts) > 1 and not parts[-1][1]):
        raise UserError(f"cannot read {what} {text!r} as a duration", "write it like 10s, 150ms, 10m or 1h30m")
    value = sum(float(num) * _DURATION_S[(unit or bare_unit).lower()] for num, unit in parts)
    if value <= 0:
        raise UserError(f"{what} {text!r} must be positive", "give a duration such as 10s or 150ms")
    if value > DURATION_SECONDS.hi:  # also an overflow to infinity: 400 nines
        raise UserError(
            f"{what} {str(text)[:40]!r} is longer than {DURATION_SECONDS.why}",
            "give a duration such as 10s, 150ms or 2h",
        )
    return value


def times_faster(ours: float, theirs: float, *, lower_is_faster: bool) -> str:
    """How `ours` compares with `theirs` as words a reader takes in at once: '2.0x slower', '1.3x
    faster' (the factor is always at least 1: never '0.49x faster'), or 'the same' within 5%.
    `lower_is_faster`: True for times (ms), False for rates (tok/s)."""
    if ours <= 0 or theirs <= 0:
        raise ValueError(f"times_faster needs positive values, got {ours} and {theirs}")
    factor = max(ours, theirs) / min(ours, theirs)  # the same arithmetic whichever way round
    if factor < 1.05:
        return "the same"
    faster = ours < theirs if lower_is_faster else ours > theirs
    return f"{factor:.{0 if factor >= 10 else 1}f}x {'faster' if faster else 'slower'}"
