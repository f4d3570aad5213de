"""Where studies persist, opened safely: an Optuna journal file (the default) or an RDB URL.

What `open_storage` guarantees before Optuna writes a byte:

- **Only stores are written.** An existing file must already be an Optuna journal (every line a
  JSON record with an `op_code`) or, for `sqlite:///`, an SQLite database that is empty or holds
  Optuna's tables. Anything else (a user's notes, a directory, `/dev/null`, a path under a file, a
  read-only place) is refused with a `UserError` and left untouched.
- **A torn tail is repaired, not built upon.** A crash mid-append leaves a last line without its
  newline; Optuna's reader skips it, but its next append would glue a record onto it and every
  later read fails (`JournalFileBackend.read_logs` raises on a bad line that is not the last, see
  optuna/storages/journal/_file.py). Under the lock, the journal is cut back to its intact records
  and the dropped bytes are kept beside it in `<journal>.torn-<time>`; a note says what was dropped.
- **Locks cannot go stale.** Optuna's default journal lock is a symlink `<journal>.lock` that a
  killed process leaves behind (the next writer waits 30 s, then warns). kttune locks with
  `flock(2)` on `<journal>.flock`, which the kernel releases when the holder dies; an old
  `<journal>.lock` found at open is removed with a note.
- **In-memory SQLite databases are refused** (`sqlite://`, `sqlite:///:memory:`): a study there
  cannot resume, and the mistake is easy to make. A throwaway study is asked for by name instead:
  `:memory:` alone opens Optuna's `InMemoryStorage`, with a note that nothing will resume it. The
  decision is made here, so the model search, the measured search and the figures treat it alike.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kttune.errors import UserError
from kttune.paths import default_study_storage

SQLITE_MAGIC = b"SQLite format 3\x00"
STALE_LOCK_AGE_S = 2.0  # Optuna holds its symlink lock for one append (milliseconds)
STORAGE_FIX = "pass --storage a new file path (e.g. ./kttune.journal) or sqlite:///kttune.db"
IN_MEMORY = ":memory:"  # --storage value for a throwaway study in this process's memory
IN_MEMORY_NOTE = "--storage :memory: keeps the study in this process only: nothing can resume or share it"


@dataclass(frozen=True)
class OpenedStorage:
    storage: Any  # an optuna BaseStorage
    url: str  # the journal path or the RDB URL
    notes: tuple[str, ...] = ()  # repairs made on opening (torn records, stale locks)


try:  # Optuna >= 4 (the journal backends moved to optuna.storages.journal)
    from optuna.storages.journal import BaseJournalFileLock as _LockBase
except ImportError:  # pragma: no cover
    _LockBase = object  # type: ignore[assignment,misc]


class FlockLock(_LockBase):  # type: ignore[misc,valid-type]
    """A journal lock on `flock(2)`: held by an open file description, released by the kernel when
    its process exits or is killed, so it never goes stale. Blocking; re-entrant per object."""

    def __init__(self, journal_path: str) -> None:
        self.path = journal_path + ".flock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        import fcntl

        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


# ---- journal files --------------------------------------------------------------------------------


def _is_record(line: bytes) -> bool:
    if not line.endswith(b"\n"):
        return False
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(rec, dict) and "op_code" in rec


def _intact_prefix(data: bytes) -> tuple[int, int, int]:
    """(bytes of the intact leading records, their count, count of lines after them)."""
    pos = count = 0
    lines = data.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not _is_record(line):
            return pos, count, len(lines) - i
        pos += len(line)
        count += 1
    return pos, count, 0


def _check_writable_file(path: Path, what: str) -> None:
    """Refuse what is not (or cannot become) a regular, writable file; never changes an existing one."""
    if path.exists() and not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file (a device, pipe or socket)"
        raise UserError(f"{what} {path} is {kind}", STORAGE_FIX)
    parent = path.parent
    for up in (parent, *parent.parents):
        if up.exists():
            if not up.is_dir():
                raise UserError(f"{what} {path} lies under {up}, which is a file, not a directory", STORAGE_FIX)
            break
    try:
        parent.mkdir(parents=True, exist_ok=True)
        # Opening for append changes neither an existing file's bytes nor its mtime.
        with open(path, "ab"):
            pass
    except OSError as e:
        raise UserError(f"cannot write {what} {path} ({e.strerror or e})",
                        "pass --storage a path in a writable directory, or set KTTUNE_CACHE_DIR") from None


def _refuse_foreign(path: Path, data: bytes, what: str) -> None:
    if data.startswith(SQLITE_MAGIC):
        raise UserError(f"{what} {path} is an SQLite database, not a journal file; kttune left it untouched",
                        f"pass --storage sqlite:///{path} to use it as an Optuna RDB store")
    first = data.split(b"\n", 1)[0] + (b"\n" if b"\n" in data else b"")
    if not _is_record(first) and b"\n" in data:
        raise UserError(f"{what} {path} is not an Optuna journal (its first line is not a journal record); "
                        "kttune left it untouched", STORAGE_FIX)
    if b"\n" not in data and not data.lstrip().startswith(b'{"op_code"'):
        raise UserError(f"{what} {path} is not an Optuna journal; kttune left it untouched", STORAGE_FIX)


def repair_journal(path: Path, lock: FlockLock) -> list[str]:
    """Cut a journal back to its intact records (under `lock`), keeping the dropped bytes in a
    `.torn-<time>` file beside it. Returns the notes to print; [] when nothing was wrong."""
    notes: list[str] = []
    lock.acquire()
    try:
        data = path.read_bytes()
        keep, records, dropped_lines = _intact_prefix(data)
        if keep == len(data):
            return notes
        backup = path.with_name(f"{path.name}.torn-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        with open(backup, "wb") as f:
            f.write(data[keep:])
            f.flush()
            os.fsync(f.fileno())
        os.truncate(path, keep)
        what = ("a torn last record" if dropped_lines == 1 else f"{dropped_lines} records from a torn one on")
        notes.append(f"journal {path}: dropped {what} ({len(data) - keep} bytes, left by an interrupted write); "
                     f"resuming from its {records} intact records; dropped bytes kept in {backup}")
    finally:
        lock.release()
    return notes


def _clear_stale_optuna_lock(path: Path) -> list[str]:
    lock = Path(str(path) + ".lock")
    try:
        st = os.lstat(lock)
    except FileNotFoundError:
        return []
    if time.time() - st.st_mtime < STALE_LOCK_AGE_S:
        return []  # a live Optuna writer may hold it for a moment
    try:
        os.unlink(lock)
    except OSError:
        return []
    return [f"removed stale lock {lock} left by a killed run (kttune now locks with flock, which cannot go stale)"]


def open_journal(path: Path, what: str = "--storage") -> OpenedStorage:
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    existed = path.exists()
    if existed and path.is_file():
        try:
            with open(path, "rb") as f:
                head = f.read(1 << 16)
        except OSError as e:
            raise UserError(f"cannot read {what} {path} ({e.strerror or e})", STORAGE_FIX) from None
        if head:
            _refuse_foreign(path, head, what)
    _check_writable_file(path, what)
    lock = FlockLock(str(path))
    try:
        notes = _clear_stale_optuna_lock(path) + repair_journal(path, lock)
        storage = JournalStorage(JournalFileBackend(str(path), lock_obj=lock))
    except OSError as e:
        raise UserError(f"cannot use {what} {path} ({e.strerror or e})", STORAGE_FIX) from None
    return OpenedStorage(storage, str(path), tuple(notes))


# ---- RDB URLs -------------------------------------------------------------------------------------


def _sqlite_path(url: str) -> str | None:
    """The file of a sqlite URL; '' for in-memory forms."""
    rest = url.split("://", 1)[1]
    rest = rest.split("?", 1)[0]
    if not rest.startswith("/"):
        return ""  # sqlite:// (memory) or a host part SQLite does not have
    path = rest[1:]
    return "" if path in ("", ":memory:") else path


def open_rdb(url: str) -> OpenedStorage:
    import optuna

    if url.lower().startswith("sqlite"):
        path = _sqlite_path(url)
        if not path or "mode=memory" in url:
            raise UserError(f"--storage {url} is an in-memory database: the study would vanish when kttune exits "
                            "and could not be resumed",
                            "pass a file, e.g. --storage sqlite:///kttune.db (or --storage :memory: for a throwaway study)")
        p = Path(path).expanduser()
        if p.is_file() and p.stat().st_size:
            with open(p, "rb") as f:
                if f.read(16) != SQLITE_MAGIC:
                    raise UserError(f"--storage {url}: {p} is not an SQLite database; kttune left it untouched", STORAGE_FIX)
            _refuse_foreign_sqlite(p, url)
        if not p.parent.is_dir():
            raise UserError(f"--storage {url}: directory {p.parent} does not exist", "create it, or " + STORAGE_FIX)
        _check_writable_file(p, "--storage")
    try:
        return OpenedStorage(optuna.storages.RDBStorage(url), url)
    except Exception as e:  # bad URL, missing driver, unreachable server
        msg = " ".join(str(e).split())[:200]
        raise UserError(f"cannot open Optuna storage {url!r} ({type(e).__name__}: {msg})", STORAGE_FIX) from None


def _refuse_foreign_sqlite(p: Path, url: str) -> None:
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        finally:
            con.close()
    except sqlite3.Error as e:
        raise UserError(f"--storage {url}: cannot read {p} ({e})", STORAGE_FIX) from None
    if tables and not {"studies", "version_info"} <= tables:
        raise UserError(f"--storage {url}: {p} is an SQLite database with tables of its own, not an Optuna store; "
                        "kttune left it untouched", STORAGE_FIX)


def open_storage(storage: str | None) -> OpenedStorage:
    """`--storage` -> an opened, checked Optuna storage. None: the journal in the cache dir;
    `:memory:`: Optuna's InMemoryStorage (a throwaway study, with a note saying so)."""
    if storage is not None and not storage.strip():
        raise UserError("--storage is empty", STORAGE_FIX)
    if storage == IN_MEMORY:
        import optuna

        return OpenedStorage(optuna.storages.InMemoryStorage(), IN_MEMORY, (IN_MEMORY_NOTE,))
    if storage and "://" in storage:
        return open_rdb(storage)
    if storage is None:
        path = Path(default_study_storage())
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the study directory {path.parent} ({e.strerror or e})",
                            "set KTTUNE_CACHE_DIR to a writable directory, or pass --storage FILE") from None
        return open_journal(path, "the default study journal")
    return open_journal(Path(storage).expanduser())
