"""Where kttune keeps its files: the user cache (probed profiles, Optuna studies)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


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


def replace_atomically(path: str | os.PathLike, write: Callable[[str], None], suffix: str = ".tmp") -> Path:
    """Write a file whole or not at all: `write(tmp)` fills a temporary file in the same
    directory, which then replaces `path` (readable by all, as a normal file would be); on any
    failure the temporary file is removed and `path` is left as it was."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=suffix, dir=p.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return p
