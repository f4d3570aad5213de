"""Closed kt-kernel layers kept for a later layer of the same weights, where kt-kernel cannot free
them (`kttune.spec.kt_classes.kt_class_leaks`): destroying such a layer keeps its packed weights all
the same, so a probe or a test session that builds one layer again and again would grow by a layer
each time. A layer whose host experts name their values (`HostExperts.content_key`: drawn by
`HostExperts.random`, untouched since) is handed back on `close()` and taken by the next layer of the
same key, which then needs no build: its values, class, pool and sizes are the same
(docs/path-runner.md#kt-kernels-amx-layers-are-never-freed). A live layer is never shared."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_SPARES: dict[tuple, list["Spare"]] = {}
# Off: a closed layer is destroyed as kt-kernel would have it (benchmarks/bench_kt_layer_memory.py
# measures both ways).
keeping = True


@dataclass
class Spare:
    """A built layer kt-kernel's C++ side still reads: the object, its config and its mask (kept
    alive; the config holds the mask's address)."""

    moe: Any
    cfg: Any
    mask: Any
    kernel_class: str


def take(key: tuple) -> Spare | None:
    """A closed layer of `key`, removed from the spares; None if there is none."""
    found = _SPARES.get(key)
    return found.pop() if found else None


def give(key: tuple, spare: Spare) -> None:
    if not keeping:
        return
    _SPARES.setdefault(key, []).append(spare)


def spare_count() -> int:
    return sum(len(v) for v in _SPARES.values())
