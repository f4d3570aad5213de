"""Where studies persist, opened safely: an Optuna journal file (the default) or an RDB URL.

What `open_storage` guarantees before Optuna writes a byte:

- **Only stores are written.** An existing file must already be an Optuna journal (its first lines
  mostly JSON records with an `op_code`) or, for `sqlite:///`, an SQLite database that is empty or holds
  Optuna's tables. Anything else (a user's notes, a directory, `/dev/null`, a path under a file, a
  read-only place) is refused with a `UserError` and left untouched.
- **A bad line is set aside, every record kept.** A crash mid-append leaves a last line without
  its newline, and the next append glues a record onto it; a stray write can put garbage anywhere.
  Optuna's reader raises on a bad line that is not the last (`JournalFileBackend.read_logs`,
  optuna/storages/journal/_file.py), which makes the whole study unreadable. Under the lock, every
  line that is not a well-formed record is moved to `<journal>.set-aside-<time>` (one JSON object per
  line: its byte offset, size, why, its bytes) and every record before and after it stays; a note
  says what was found where. Only if a set-aside line held a study or trial creation (later records
  refer to one the journal no longer has) does the study resume from the records before it, since
  the records after would land on the wrong trials (kttune.search.journal_lines). A record of a
  newer Optuna (an op code this one does not know) is refused in one line, the file untouched.
- **Locks cannot go stale.** Optuna's default journal lock is a symlink `<journal>.lock` that a
  killed process leaves behind (the next writer waits 30 s, then warns). kttune locks with
  `flock(2)` on `<journal>.flock`, which the kernel releases when the holder dies; an old
  `<journal>.lock` found at open is removed with a note.
- **Schema creation is serialised.** Several processes opening a fresh SQLite or PostgreSQL
  database at once would race in Optuna's table creation; a lock makes them take turns
  (`_schema_lock`).
- **No password is shown.** Errors and `OpenedStorage.url` carry the URL with its password masked
  (kttune.search.storage_url, which also reads it from a file or the environment).
- **In-memory SQLite databases are refused** (`sqlite://`, `sqlite:///:memory:`): a study there
  cannot resume, and the mistake is easy to make. A throwaway study is asked for by name instead:
  `:memory:` alone opens Optuna's `InMemoryStorage`, with a note that nothing will resume it. The
  decision is made here, so the model search, the measured search and the figures treat it alike.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kttune.errors import UserError
from kttune.paths import default_study_storage
from kttune.search.storage_url import STORAGE_PARAMS, redact, shown, with_password
from kttune.search.journal_lines import RECORD_START, BadLine, classify, known_op_codes, scan_journal, split_lines

SQLITE_MAGIC = b"SQLite format 3\x00"
STALE_LOCK_AGE_S = 2.0  # Optuna holds its symlink lock for one append (milliseconds)
STORAGE_FIX = "pass {storage} a new file path (e.g. ./kttune.journal) or sqlite:///kttune.db"
IN_MEMORY = ":memory:"  # --storage value for a throwaway study in this process's memory
IN_MEMORY_NOTE = "--storage :memory: keeps the study in this process only: nothing can resume or share it"


def _error(problem: str, fix: str | None = None) -> UserError:
    """A storage error: its texts name `{storage}` and `{storage_password_file}` (kttune.errors)."""
    return UserError(problem, fix, params=STORAGE_PARAMS)


@dataclass(frozen=True)
class OpenedStorage:
    storage: Any  # an optuna BaseStorage
    url: str  # the journal path, or the RDB URL as shown: its password masked (storage_url.shown)
    notes: tuple[str, ...] = ()  # repairs made on opening (torn records, stale locks)


try:  # Optuna >= 4 (the journal backends moved to optuna.storages.journal)
    from optuna.storages.journal import BaseJournalFileLock as _LockBase
except ImportError:  # pragma: no cover
    _LockBase = object  # type: ignore[assignment,misc]


class FlockLock(_LockBase):  # type: ignore[misc,valid-type]
    """A journal lock on `flock(2)`: held by an open file description, released by the kernel when
    its process exits or is killed, so it never goes stale. Blocking; an object that holds it takes
    it again at once (one search, one thread, one object: Optuna's journal backend)."""

    def __init__(self, journal_path: str) -> None:
        self.path = journal_path + ".flock"
        self._fd: int | None = None

    def acquire(self) -> bool:
        import fcntl

        if self._fd is not None:  # already ours (an interrupt ended the acquire that took it)
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            with _interrupts_held():  # a Ctrl-C between the lock and the bookkeeping would leak it
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._fd = fd
        except BaseException:
            if self._fd != fd:  # not taken: the descriptor is ours to close
                os.close(fd)
            raise
        return True

    def release(self) -> None:
        import fcntl

        with _interrupts_held():
            if self._fd is not None:
                fd, self._fd = self._fd, None
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


@contextmanager
def _interrupts_held():
    """SIGINT held back until the step is done, then delivered to the handler that was there: a
    KeyboardInterrupt raised between taking the journal's flock and recording its descriptor would
    leave the lock held by a descriptor nobody releases, and the interrupted search's own cleanup
    (Optuna marks the running trial failed) would then wait on it for ever. Python handles signals
    in the main thread alone; elsewhere the step runs as it is."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield  # no Python handler to defer to (not the main thread, or one installed outside Python)
        return
    caught: list[int] = []
    try:  # the handler swapped inside the try: an interrupt on either side of it leaves `previous`
        signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)


# ---- journal files --------------------------------------------------------------------------------


def _check_writable_file(path: Path, what: str) -> None:
    """Refuse what is not (or cannot become) a regular, writable file; never changes an existing one."""
    if path.exists() and not path.is_file():
        kind = "a directory" if path.is_dir() else "not a regular file (a device, pipe or socket)"
        raise _error(f"{what} {path} is {kind}", STORAGE_FIX)
    parent = path.parent
    for up in (parent, *parent.parents):
        if up.exists():
            if not up.is_dir():
                raise _error(f"{what} {path} lies under {up}, which is a file, not a directory", STORAGE_FIX)
            break
    try:
        parent.mkdir(parents=True, exist_ok=True)
        # Opening for append changes neither an existing file's bytes nor its mtime.
        with open(path, "ab"):
            pass
    except OSError as e:
        raise _error(
            f"cannot write {what} {path} ({e.strerror or e})",
            "pass {storage} a path in a writable directory, or set KTTUNE_CACHE_DIR",
        ) from None


def _refuse_foreign(path: Path, head: bytes, whole: bool, what: str) -> None:
    """Refuse a file that is not an Optuna journal, judged by its first 64 KiB (`head`; `whole`: the
    file ends there): it is one when its complete lines are mostly records (a few bad lines are
    repaired), or when it is a single record torn before its newline."""
    if head.startswith(SQLITE_MAGIC):
        raise _error(
            f"{what} {path} is an SQLite database, not a journal file; kttune left it untouched",
            f"pass {{storage}} sqlite:///{path} to use it as an Optuna RDB store",
        )
    ops = known_op_codes()
    lines = [line for _, line in split_lines(head)]
    if lines and not whole and not lines[-1].endswith(b"\n"):
        lines.pop()  # cut by the 64 KiB window, not by the file
    kinds = [classify(line, ops)[0] for line in lines if line.endswith(b"\n")]
    records = sum(k in ("record", "unknown") for k in kinds)
    if not kinds and head.lstrip().startswith(RECORD_START):
        return  # one record, torn by a crash before its newline
    if records == 0 or records < len(kinds) - records:
        raise _error(
            f"{what} {path} is not an Optuna journal ({'none' if records == 0 else 'most'} of its first "
            "lines are not journal records); kttune left it untouched",
            STORAGE_FIX,
        )


def _side_file(path: Path, lines: tuple[BadLine, ...]) -> Path:
    """Write the lines set aside, one JSON object each (offset, size, why, the bytes), beside the journal."""
    side = path.with_name(f"{path.name}.set-aside-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    with open(side, "w", encoding="utf-8") as f:
        for b in lines:
            f.write(json.dumps(b.to_dict()) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return side


def _rewrite(path: Path, data: bytes, keep: bytes) -> None:
    """Leave `keep` in the journal: cut in place when it is a prefix, else replace the file whole."""
    if data.startswith(keep):
        os.truncate(path, len(keep))
        return
    real = Path(os.path.realpath(path))
    tmp = real.with_name(f".{real.name}.repair-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(keep)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, os.stat(real).st_mode & 0o7777)
        os.replace(tmp, real)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dfd = os.open(real.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _where(bad: tuple[BadLine, ...], most: int = 3) -> str:
    shown = [f"byte {b.offset}: {b.why}" for b in bad[:most]]
    return "; ".join(shown) + (f"; and {len(bad) - most} more" if len(bad) > most else "")


def repair_journal(path: Path, lock: FlockLock) -> list[str]:
    """Set aside every line of the journal that is not a well-formed Optuna record (under `lock`),
    keeping every record before and after it; the lines go to a `.set-aside-<time>` file beside it,
    with their byte offsets. A record of a newer Optuna is refused with the file untouched.
    Returns the notes to print; [] when nothing was wrong. See kttune.search.journal_lines."""
    lock.acquire()
    try:
        data = path.read_bytes()
        scan = scan_journal(data)
        if scan.unknown is not None:
            import optuna

            raise _error(
                f"journal {path} holds a record this Optuna {optuna.__version__} cannot read (op code "
                f"{scan.unknown.op_code} at byte {scan.unknown.offset}, written by a newer Optuna); "
                "kttune left the file untouched",
                "upgrade Optuna to the version that wrote it (pip install -U optuna), or pass {storage} another file",
            )
        if not scan.bad:
            return []
        if scan.forward_ref_at is not None:
            first = scan.bad[0]
            aside: tuple[BadLine, ...] = (
                BadLine(first.offset, data[first.offset :], "from a lost creation record on"),
            )
            keep = data[: first.offset]
            n = len(split_lines(data[first.offset :]))
            side = _side_file(path, aside)
            _rewrite(path, data, keep)
            return [
                f"journal {path}: the line at byte {first.offset} is not an Optuna record ({first.why}) and held a "
                f"study or trial creation (the record at byte {scan.forward_ref_at} refers to one the journal no "
                f"longer has), so the study resumes from the {scan.records_before_first_bad} records before it; "
                f"the {n} lines from byte {first.offset} on are kept in {side}"
            ]
        side = _side_file(path, scan.bad)
        _rewrite(path, data, b"".join(scan.kept))
        if scan.torn_tail_only:
            b = scan.bad[0]
            return [
                f"journal {path}: set aside a torn last record ({len(b.data)} bytes at byte {b.offset}, left by an "
                f"interrupted write); resuming from its {len(scan.kept)} intact records; the bytes are kept in {side}"
            ]
        return [
            f"journal {path}: set aside {len(scan.bad)} line{'s' if len(scan.bad) > 1 else ''} that "
            f"{'are' if len(scan.bad) > 1 else 'is'} not an Optuna record ({_where(scan.bad)}); kept all "
            f"{len(scan.kept)} records before and after, so no finished trial leaves the study; the lines are "
            f"kept in {side}"
        ]
    finally:
        lock.release()


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


def open_journal(path: Path, what: str = "{storage}") -> OpenedStorage:
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    existed = path.exists()
    if existed and path.is_file():
        try:
            with open(path, "rb") as f:
                head = f.read(1 << 16)
        except OSError as e:
            raise _error(f"cannot read {what} {path} ({e.strerror or e})", STORAGE_FIX) from None
        if head:
            _refuse_foreign(path, head, len(head) < (1 << 16) or path.stat().st_size == len(head), what)
    _check_writable_file(path, what)
    lock = FlockLock(str(path))
    try:
        notes = _clear_stale_optuna_lock(path) + repair_journal(path, lock)
        storage = JournalStorage(JournalFileBackend(str(path), lock_obj=lock))
    except OSError as e:
        raise _error(f"cannot use {what} {path} ({e.strerror or e})", STORAGE_FIX) from None
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


RDB_FIX = (
    "check that the database server runs and that the URL's user, host, port and database are right "
    "(a password: {storage_password_file} or $KTTUNE_STORAGE_PASSWORD)"
)
PG_SCHEMA_LOCK = 0x6B7474756E65  # pg_advisory_lock key ("kttune") held while Optuna creates its tables


@contextmanager
def _schema_lock(url: str, sqlite_file: Path | None) -> Iterator[None]:
    """Serialise Optuna's table creation across processes. `RDBStorage(url)` creates the schema
    (create_all, then a version row, then alembic's table) without a lock of its own, so processes
    opening a fresh database at once collide ("table studies already exists", a UNIQUE constraint).
    SQLite: flock on `<db>.flock` (released by the kernel if the holder dies); PostgreSQL: a
    session-level advisory lock (released when its connection closes). Other servers: none."""
    if sqlite_file is not None:
        lock = FlockLock(str(sqlite_file))
        lock.acquire()
        try:
            yield
        finally:
            lock.release()
        return
    if not url.lower().startswith("postgres"):
        yield
        return
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("select pg_advisory_lock(:k)"), {"k": PG_SCHEMA_LOCK})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("select pg_advisory_unlock(:k)"), {"k": PG_SCHEMA_LOCK})
    finally:
        engine.dispose()


DRIVER_PACKAGES = {
    "psycopg": "psycopg[binary]",
    "psycopg2": "psycopg2-binary",
    "pymysql": "PyMySQL",
    "MySQLdb": "mysqlclient",
    "pg8000": "pg8000",
}  # module SQLAlchemy imports -> PyPI package


def _rdb_error(show: str, e: Exception) -> UserError:
    """A failed connection, in one line without the password: the driver's own words, redacted."""
    msg = redact(" ".join(str(e).split()))[:200]
    missing, cur = None, e
    while isinstance(cur, ImportError):  # Optuna wraps the driver's ImportError in its own
        missing, cur = cur, cur.__cause__
    if missing is not None:
        module = (getattr(missing, "name", None) or "").split(".")[0]
        package = DRIVER_PACKAGES.get(module, module or "the driver its URL names")
        return _error(
            f"cannot open Optuna storage {show}: its database driver is not installed ({redact(str(missing))})",
            f"pip install {package!r}" if module else f"install {package}",
        )
    return _error(f"cannot open Optuna storage {show} ({type(e).__name__}: {msg})", RDB_FIX)


def open_rdb(storage: str) -> OpenedStorage:
    """An RDB URL -> Optuna's RDBStorage, its tables created under a lock (`_schema_lock`). Every
    message names the URL with its password masked (kttune.search.storage_url)."""
    import optuna

    url = with_password(storage)
    show = shown(url)
    sqlite_file = None
    if url.lower().startswith("sqlite"):
        path = _sqlite_path(url)
        if not path or "mode=memory" in url:
            raise _error(
                f"{{storage}} {show} is an in-memory database: the study would vanish when kttune exits "
                "and could not be resumed",
                "pass a file, e.g. {storage} sqlite:///kttune.db (or {storage} :memory: for a throwaway study)",
            )
        p = Path(path).expanduser()
        if p.is_file() and p.stat().st_size:
            with open(p, "rb") as f:
                if f.read(16) != SQLITE_MAGIC:
                    raise _error(
                        f"{{storage}} {show}: {p} is not an SQLite database; kttune left it untouched", STORAGE_FIX
                    )
            _refuse_foreign_sqlite(p, show, whole=False)  # before any lock file is made beside it
        if not p.parent.is_dir():
            raise _error(f"{{storage}} {show}: directory {p.parent} does not exist", "create it, or " + STORAGE_FIX)
        _check_writable_file(p, "{storage}")
        sqlite_file = p
    try:
        with _schema_lock(url, sqlite_file):
            # under the lock: outside it, a process could see another's tables half created and take
            # them for a foreign database (6 processes on a fresh file: 1 of 4 rounds failed so)
            if sqlite_file is not None and sqlite_file.stat().st_size:
                _refuse_foreign_sqlite(sqlite_file, show)
            return OpenedStorage(optuna.storages.RDBStorage(url), show)
    except UserError:
        raise
    except Exception as e:  # bad URL, missing driver, unreachable server, refused login
        raise _rdb_error(show, e) from None


# Optuna's tables (optuna/storages/_rdb/models.py); `studies` is created first
OPTUNA_TABLES = frozenset(
    {
        "studies",
        "study_directions",
        "study_user_attributes",
        "study_system_attributes",
        "trials",
        "trial_user_attributes",
        "trial_system_attributes",
        "trial_params",
        "trial_values",
        "trial_intermediate_values",
        "trial_heartbeats",
        "version_info",
        "alembic_version",
    }
)


def _refuse_foreign_sqlite(p: Path, show: str, whole: bool = True) -> None:
    """Refuse an SQLite database that is not an Optuna store, leaving it untouched. `whole`: it must
    hold Optuna's `studies` and `version_info` (under the schema lock, where no other process is
    creating them); else only a database with none of Optuna's tables is refused (outside the lock
    another process may be halfway through creating them)."""
    import sqlite3

    try:
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        finally:
            con.close()
    except sqlite3.Error as e:
        raise _error(f"{{storage}} {show}: cannot read {p} ({e})", STORAGE_FIX) from None
    if tables and not ({"studies", "version_info"} <= tables if whole else tables & OPTUNA_TABLES):
        raise _error(
            f"{{storage}} {show}: {p} is an SQLite database with tables of its own, not an Optuna store; "
            "kttune left it untouched",
            STORAGE_FIX,
        )


def open_storage(storage: str | None) -> OpenedStorage:
    """`--storage` -> an opened, checked Optuna storage. None: the journal in the cache dir;
    `:memory:`: Optuna's InMemoryStorage (a throwaway study, with a note saying so)."""
    if storage is not None and not storage.strip():
        raise _error("{storage} is empty", STORAGE_FIX)
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
            raise _error(
                f"cannot create the study directory {path.parent} ({e.strerror or e})",
                "set KTTUNE_CACHE_DIR to a writable directory, or pass {storage} FILE",
            ) from None
        return open_journal(path, "the default study journal")
    return open_journal(Path(storage).expanduser())
