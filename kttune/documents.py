"""The files kttune writes where the user points `--out`, `-o` or `--report`, and which existing
files a command may replace there.

One policy for every command: a command writes over nothing but its own earlier output (the same
kind of document, as the document itself says), and never over one of its inputs; anything else
at the path is refused in one line (exit 2) before any work, with the fix. Writes are atomic
(kttune.paths.replace_atomically). The kinds:

  hardware profile   `kttune probe`, `kttune calibrate`, `kttune validate --out`: a profile of
                     the same machine (fingerprint) that was measured, not derived;
                     `kttune profile derive`: a derived profile
  path-runner result `kttune paths --out`
  report directory   `--report DIR`, `kttune report -o DIR`: a missing or empty directory, or
                     one holding a report.md that kttune wrote
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from kttune.bounds import MAX_JSON_BYTES, loads_json
from kttune.errors import UserError
from kttune.hw.profile import PROFILE_FORMAT
from kttune.schema import doc_kind

DERIVE_COMMAND = "kttune profile derive"  # provenance.command of a derived profile (kttune.hw.derive)
REPORT_MARK = "Written by kttune"  # the line under a report's title (kttune.emit.markdown_report writes it)


# ---- what a document is -------------------------------------------------------------------------


def is_profile(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("format") == PROFILE_FORMAT


def is_derived_profile(doc: Any) -> bool:
    prov = doc.get("provenance") if is_profile(doc) else None
    return isinstance(prov, dict) and str(prov.get("command", "")).startswith(DERIVE_COMMAND)


def is_paths_result(doc: Any) -> bool:
    """`kttune paths --json/--out` ({"request", "runs"}) or a results file of several under "results"
    (benchmarks/bench_paths.py). A document with a schema is one only by its schema (then its keys
    are checked for shape); one without, by its keys."""
    kind = doc_kind(doc)
    if kind is not None and kind[0] != "paths":
        return False
    if isinstance(doc, dict) and isinstance(doc.get("results"), list) and doc["results"]:
        return all(is_paths_result(d) for d in doc["results"])
    return isinstance(doc, dict) and isinstance(doc.get("request"), dict) and isinstance(doc.get("runs"), list)


# what a document is, by its schema (kttune.schema), for a message
DESCRIPTIONS = {
    "search": "a kttune search result",
    "explain": "a kttune explain result",
    "search-measured": "a kttune measured-search result",
    "simulate": "a kttune simulation result",
    "paths": "a path-runner result (kttune paths)",
    "tune": "a kttune tune result",
    "validate": "a kttune validation result",
    "report": "a list of what a kttune report wrote",
}


def describe(doc: Any) -> str:
    """What an existing document is, for a message: `the measured hardware profile of <machine>`.
    By its schema, else (written before the envelope) by its keys."""
    if is_profile(doc):
        prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
        kind = "derived" if is_derived_profile(doc) else str(prov.get("kind") or "")
        return f"the {kind + ' ' if kind else ''}hardware profile of {prov.get('machine') or 'an unnamed machine'}"
    kind = doc_kind(doc)
    if kind is not None:
        return DESCRIPTIONS.get(kind[0], f"a kttune {kind[0]} document")
    if is_paths_result(doc):
        return "a path-runner result (kttune paths)"
    if isinstance(doc, dict) and "pick" in doc and "pareto" in doc:
        return "a kttune search result"
    if isinstance(doc, dict) and "evaluation" in doc:
        return "a kttune explain result"
    return "a JSON document kttune did not write"


def _existing_document(path: Path) -> tuple[bool, Any, str]:
    """(empty, document or None, description) of the file at `path`."""
    size = path.stat().st_size
    if size == 0:
        return True, None, "an empty file"
    if size > MAX_JSON_BYTES:
        return False, None, f"a {size / 1024**2:,.0f} MiB file kttune did not write"
    try:
        doc = loads_json(path.read_bytes(), str(path), "", nan_as_null=True)
    except (UserError, OSError):
        return False, None, "a file that is not a kttune document"
    return False, doc, describe(doc)


_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError)


@contextmanager
def document_of(origin: str | None, kind: str):
    """Reading one document: a field missing or of the wrong type (what a hand-edited or foreign
    file has) is a UserError naming the file. `origin` None: kttune's own document, so a bug."""
    try:
        yield
    except UserError:
        raise
    except _MALFORMED as e:
        if origin is None:
            raise
        raise UserError(
            f"{origin} looks like a kttune {kind} document but {type(e).__name__}: {' '.join(str(e).split())[:120]}",
            "pass the file kttune wrote with --json, unedited",
        ) from None


# ---- which files a command may replace ----------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """What a command writes at a path the user gave: `what` it is, the `command` that writes it,
    and `replaces`, which existing documents are that command's own earlier output."""

    what: str
    command: str
    replaces: Callable[[Any], bool]
    why_not: Callable[[Any], str] = field(default=lambda doc: "")  # a reason beyond the kind, for the message


def profile_output(command: str, fingerprint: str, derived: bool) -> Output:
    """A hardware profile: a derived one replaces derived ones; a measured one (probe, calibrate,
    validate) replaces a measured profile of the same machine only."""

    def replaces(doc: Any) -> bool:
        if not is_profile(doc) or is_derived_profile(doc) != derived:
            return False
        return derived or doc.get("fingerprint") == fingerprint

    def why_not(doc: Any) -> str:
        if is_profile(doc) and not derived and not is_derived_profile(doc):
            return " (another machine: its fingerprint differs)"
        return ""

    return Output(
        "a derived hardware profile" if derived else "a measured hardware profile of the same machine",
        command,
        replaces,
        why_not,
    )


def profile_output_from(command: str, source: Any) -> Output:
    """The output of a command that writes `source` (a HardwareProfile) back with more in it
    (calibrate, validate): the same kind of profile, of the same machine."""
    prov = source.provenance
    return profile_output(command, source.fingerprint, str(prov.command).startswith(DERIVE_COMMAND))


PATHS_OUTPUT = Output("a path-runner result", "kttune paths", is_paths_result)


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def _refuse_inputs(p: Path, flag: str, inputs: Iterable[tuple[str | os.PathLike | None, str]]) -> None:
    for inp, role in inputs:
        if inp is not None and str(inp) and Path(inp).expanduser().is_file() and _same(p, Path(inp).expanduser()):
            raise UserError(
                f"{flag} {p} is this command's {role}: writing there would replace what it reads",
                f"pass {flag} another file, e.g. {p.with_name(p.stem + '-out' + p.suffix)}",
            )


def _check_place(p: Path, flag: str, example: str) -> None:
    """A path that can take a file: not a directory or device, not under a file, writable."""
    if p.exists() and not p.is_file():
        raise UserError(
            f"{flag} {p} is {'a directory' if p.is_dir() else 'not a regular file'}",
            f"pass {flag} a file path, e.g. {p / example if p.is_dir() else example}",
        )
    up = p.parent
    while not up.exists() and up != up.parent:
        up = up.parent
    if not up.is_dir():
        raise UserError(f"{flag} {p} lies under {up}, which is a file, not a directory", f"pass {flag} a file path")
    if not os.access(up if not p.exists() else p, os.W_OK):
        raise UserError(f"{flag} {p} is not writable", f"pass {flag} a path in a writable directory")


def check_output_file(
    path: str | os.PathLike, out: Output, inputs: Iterable[tuple[Any, str]] = (), flag: str = "--out"
) -> Path:
    """Refuse, before any work, a `flag` path the command must not write: one of its `inputs`
    ((path, role) pairs), a place that cannot take a file, or a file holding anything but `out`'s
    own earlier output. Changes nothing; returns the path."""
    p = Path(path).expanduser()
    _refuse_inputs(p, flag, inputs)
    _check_place(p, flag, "out.json")
    if p.is_file():
        empty, doc, what = _existing_document(p)
        if not empty and (doc is None or not out.replaces(doc)):
            raise UserError(
                f"{flag} {p} holds {what}{out.why_not(doc) if doc is not None else ''}, which "
                f"`{out.command}` does not replace (it writes {out.what})",
                f"pass {flag} a new file, or move {p} away first",
            )
    return p


def check_report_dir(path: str | os.PathLike, flag: str = "--report", inputs: Iterable[tuple[Any, str]] = ()) -> Path:
    """A report directory kttune may write: missing, empty, or holding a report.md kttune wrote;
    none of `inputs` inside it under a name the report writes. Changes nothing; returns the path."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise UserError(
            f"{flag} {p} is a file, not a directory", f"pass {flag} a directory, e.g. {p.parent / 'kttune-report'}"
        )
    if p.is_dir():
        entries = sorted(e.name for e in p.iterdir())
        md = p / "report.md"
        ours = md.is_file() and REPORT_MARK in md.read_text(errors="replace")[:2000]
        if entries and not ours:
            shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
            raise UserError(
                f"{flag} {p} holds files that are not a kttune report ({shown})",
                f"pass {flag} a new or empty directory, e.g. {p / 'kttune-report'}",
            )
        for inp, role in inputs:
            q = Path(inp).expanduser() if inp is not None and str(inp) else None
            if q is not None and q.is_file() and _same(q.parent, p) and _report_writes(q.name):
                raise UserError(
                    f"{flag} {p} holds {q.name}, this command's {role}, which the report would replace",
                    f"pass {flag} another directory",
                )
    else:
        _check_place(p, flag, "kttune-report")
    return p


def _report_writes(name: str) -> bool:
    """Whether a report (with its documents) writes a file of this name."""
    import fnmatch

    return any(
        fnmatch.fnmatch(name, pat)
        for pat in (
            "report.md",
            "*.png",
            "result*.json",
            "measured*.json",
            "profile*.json",
            "runs.json",
            "simulation*.json",
        )
    )
