"""Shared test inputs: real catalog models and the shipped profiles; the repository's scripts as modules."""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

from kttune.config import LaunchConfig
from kttune.hw.registry import load_shipped
from kttune.spec.loader import load_model

DATASHEET_H200 = "datasheet-h200-pcie5-xeon-amx-16c"

# Fixtures: copies of measured results the tests read (tests/data/README.md says where each came from)
DATA = Path(__file__).resolve().parent / "data"
ROOT = Path(__file__).resolve().parents[1]
PATHS_H200 = DATA / "paths-h200.json"  # the path runner on the H200 box, the latest of two grids
PATHS_H200_EARLIER = DATA / "paths-h200-earlier.json"  # the same grid an hour earlier


@lru_cache(maxsize=None)
def model(name: str, method: str | None = None):
    return load_model(name, method)


@lru_cache(maxsize=None)
def profile(name: str = DATASHEET_H200):
    return load_shipped(name)


def cfg(method: str, **kw) -> LaunchConfig:
    base = dict(
        method=method,
        tp=1,
        num_gpu_experts=0,
        chunked_prefill_size=8192,
        gpu_prefill_token_threshold=0,
        max_total_tokens=65536,
        cpuinfer_threads=15,
        threadpool_count=1,
        max_running_requests=8,
        cuda_graph_max_bs=8,
    )
    base.update(kw)
    return LaunchConfig(**base)


TORN_TAIL = b'{"op_code": 5, "worker_id": "killed", "trial_id": 0, "param_na'  # an append cut off mid-record


def set_aside(note: str) -> list[tuple[int, bytes]]:
    """(byte offset, bytes) of each line a journal repair set aside, read from the side file its
    note names (`... kept in <file>`)."""
    import base64
    import json

    with open(note.rsplit("kept in ", 1)[1], encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [(r["offset"], r["text"].encode() if "text" in r else base64.b64decode(r["base64"])) for r in rows]


def torn_journal(path) -> bytes:
    """A real Optuna journal file (JournalFileBackend) holding one study with one finished trial,
    then the first bytes of one more record with no newline: what a crash mid-append leaves.
    Returns the intact records' bytes (what a repair must cut the file back to)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(study_name="before-the-crash", storage=JournalStorage(JournalFileBackend(str(path))))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    intact = path.read_bytes()
    assert intact.endswith(b"\n")
    with open(path, "ab") as f:
        f.write(TORN_TAIL)
    return intact


def interruptible() -> None:
    """A `preexec_fn` for a child a test sends SIGINT: Ctrl-C back to its default. A shell starts a
    background job (`pytest ... &`) with SIGINT ignored, every child inherits that, and Python then
    installs no KeyboardInterrupt handler: the child would never see the test's Ctrl-C."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def script(relative: str):
    """A script of the repository (benchmarks/, scripts/; not part of the package) loaded as a module
    named after its file, registered in sys.modules (its dataclasses resolve their annotations there)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod
