"""Where kttune keeps its files: the user cache (probed profiles, Optuna studies)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$KTTUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/kttune`, else `~/.cache/kttune`."""
    if os.environ.get("KTTUNE_CACHE_DIR"):
        return Path(os.environ["KTTUNE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kttune"


def profile_cache_path(fingerprint: str) -> Path:
    """The probed profile of the machine with this fingerprint (`kttune probe` writes it)."""
    return cache_dir() / "profiles" / f"{fingerprint}.json"


def default_study_storage() -> str:
    """Optuna storage used when `--storage` is not given: a journal file in the cache dir."""
    return str(cache_dir() / "studies.journal")
