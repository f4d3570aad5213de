"""What an Optuna journal file holds, line by line: its well-formed records and the lines that are
not records (garbage, a record torn by a crash, one glued onto a torn one). Pure: bytes in, a
`JournalScan` out; kttune.search.storage decides what to do with it, under the journal's lock.

A journal is one JSON object per line, appended by `JournalFileBackend.append_logs`
(optuna/storages/journal/_file.py) and replayed in order by `JournalStorageReplayResult.apply_logs`
(optuna/storages/journal/_storage.py). Optuna's reader raises on a bad line that is not the last
one, so one bad line anywhere makes the whole study unreadable; setting it aside keeps the rest.

What counts as a record: a JSON object with an integer `op_code` this Optuna knows, a `worker_id`,
and the fields its replay reads for that op code (`RECORD_FIELDS`, from `_apply_*` in
_storage.py). An op code this Optuna does not know is not garbage but a newer Optuna's record:
the scan reports it, and the caller refuses the file rather than drop what it cannot read.

Replay numbers studies and trials by their creation records (a study's id is the count of studies
created before it, a trial's the count of trials), and later records refer to those numbers. If
a bad line was a creation record, every number after it shifts and later records would land on
the wrong trial. A healthy journal never refers to a study or trial not yet created, so such a
reference (`forward_ref_at`) tells that a bad line held a creation; the caller then keeps only
the records before the first bad line.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

# fields each op code's replay reads (optuna/storages/journal/_storage.py, `_apply_*`)
RECORD_FIELDS: dict[str, tuple[str, ...]] = {
    "CREATE_STUDY": ("study_name", "directions"),
    "DELETE_STUDY": ("study_id",),
    "SET_STUDY_USER_ATTR": ("study_id", "user_attr"),
    "SET_STUDY_SYSTEM_ATTR": ("study_id", "system_attr"),
    "CREATE_TRIAL": ("study_id", "datetime_start"),
    "SET_TRIAL_PARAM": ("trial_id", "param_name", "param_value_internal", "distribution"),
    "SET_TRIAL_STATE_VALUES": ("trial_id", "state", "values"),
    "SET_TRIAL_INTERMEDIATE_VALUE": ("trial_id", "step", "intermediate_value"),
    "SET_TRIAL_USER_ATTR": ("trial_id", "user_attr"),
    "SET_TRIAL_SYSTEM_ATTR": ("trial_id", "system_attr"),
}
RECORD_START = b'{"op_code"'  # json.dumps puts op_code first (JournalStorage._write_log)
TORN = "torn (no newline)"  # a last line a crash cut off mid-append
GLUED = "a torn record with a whole one appended to it"


def known_op_codes() -> dict[int, str]:
    """op code -> name, as the installed Optuna defines them."""
    from optuna.storages.journal._storage import JournalOperation

    return {int(op): op.name for op in JournalOperation}


@dataclass(frozen=True)
class BadLine:
    offset: int  # byte offset of the line in the journal
    data: bytes  # the bytes set aside (with their newline, if they had one)
    why: str  # "not JSON", "torn (no newline)", ...

    def to_dict(self) -> dict:
        """One line of the side file: where it was, why, and its bytes (as text when they are UTF-8)."""
        d: dict = {"offset": self.offset, "bytes": len(self.data), "why": self.why}
        try:
            d["text"] = self.data.decode("utf-8")
        except UnicodeDecodeError:
            d["base64"] = base64.b64encode(self.data).decode("ascii")
        return d


@dataclass(frozen=True)
class UnknownRecord:
    offset: int
    op_code: int


@dataclass(frozen=True)
class JournalScan:
    kept: tuple[bytes, ...]  # the well-formed records, in order, each ending in a newline
    bad: tuple[BadLine, ...]
    unknown: UnknownRecord | None = None  # the first record of a newer Optuna, if any
    forward_ref_at: int | None = (
        None  # offset of the first record after a bad line that refers to a study/trial not yet created
    )
    records_before_first_bad: int = 0  # kept records that precede the first bad line

    @property
    def clean(self) -> bool:
        return not self.bad and self.unknown is None

    @property
    def torn_tail_only(self) -> bool:
        """The one flaw a crash mid-append leaves: a last line without its newline."""
        return len(self.bad) == 1 and self.bad[0].why == TORN


def split_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, line) with each line's b'\\n' kept: lines as Optuna's reader iterates a binary file."""
    out, pos = [], 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end + 1
        out.append((pos, data[pos:end]))
        pos = end
    return out


def _is_id(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def classify(line: bytes, ops: dict[int, str]) -> tuple[str, dict | None]:
    """('record', rec) | ('unknown', rec) | (why it is not a record, None) for one line."""
    if not line.endswith(b"\n"):
        return TORN, None
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return "not JSON", None
    if not isinstance(rec, dict) or "op_code" not in rec:
        return "JSON without an op_code", None
    op = rec["op_code"]
    if not _is_id(op):
        return "op_code is not a non-negative integer", None
    if op not in ops:
        return "unknown", rec
    missing = [k for k in ("worker_id", *RECORD_FIELDS.get(ops[op], ())) if k not in rec]
    if missing:
        return f"{ops[op]} record without {', '.join(missing)}", None
    for k in ("study_id", "trial_id"):
        if k in rec and not _is_id(rec[k]):
            return f"{ops[op]} record with a {k} that is not an id", None
    return "record", rec


def _salvage(line: bytes, ops: dict[int, str]) -> int | None:
    """Where a whole record starts inside a bad line (a record appended onto a torn one): the
    first `{"op_code"` after the line's start from which the rest is a well-formed record."""
    pos = line.find(RECORD_START, 1)
    while pos > 0:
        if classify(line[pos:], ops)[0] == "record":
            return pos
        pos = line.find(RECORD_START, pos + 1)
    return None


class _Replay:
    """Just enough of Optuna's replay to number studies and trials as it does."""

    def __init__(self, ops: dict[int, str]) -> None:
        self.ops = ops
        self.next_study = 0
        self.alive: dict[int, str] = {}  # study id -> name
        self.trials = 0

    def refers_ahead(self, rec: dict) -> bool:
        name = self.ops[rec["op_code"]]
        if name == "CREATE_STUDY":
            if rec["study_name"] not in self.alive.values():
                self.alive[self.next_study] = rec["study_name"]
                self.next_study += 1
            return False
        if "study_id" in RECORD_FIELDS.get(name, ()):
            sid = rec["study_id"]
            if sid >= self.next_study:
                return True
            if name == "DELETE_STUDY":
                self.alive.pop(sid, None)
            elif name == "CREATE_TRIAL" and sid in self.alive:
                self.trials += 1
            return False
        if "trial_id" in RECORD_FIELDS.get(name, ()):
            return rec["trial_id"] >= self.trials
        return False


def scan_journal(data: bytes) -> JournalScan:
    ops = known_op_codes()
    kept: list[bytes] = []
    bad: list[BadLine] = []
    replay = _Replay(ops)
    forward_ref_at = None
    before_first_bad = None
    for offset, line in split_lines(data):
        kind, rec = classify(line, ops)
        if kind == "unknown":
            return JournalScan(tuple(kept), tuple(bad), UnknownRecord(offset, rec["op_code"]))  # type: ignore[index]
        if kind != "record":
            start = _salvage(line, ops)
            if before_first_bad is None:
                before_first_bad = len(kept)
            if start is None:
                bad.append(BadLine(offset, line, kind))
                continue
            bad.append(BadLine(offset, line[:start], GLUED))
            offset, line = offset + start, line[start:]
            kind, rec = classify(line, ops)
        ahead = replay.refers_ahead(rec)  # type: ignore[arg-type]
        if ahead and forward_ref_at is None and before_first_bad is not None:
            forward_ref_at = offset
        kept.append(line)
    return JournalScan(
        tuple(kept), tuple(bad), None, forward_ref_at, len(kept) if before_first_bad is None else before_first_bad
    )
