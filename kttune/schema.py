"""One envelope for every JSON document kttune writes: `{"schema": "kttune.<doc>/<n>", ...}`, the
document's own keys after it. `<doc>` says what the document is, `<n>` its version (raised when a
reader of the old form would misread the new one). Readers dispatch on it (`doc_kind`); documents
written before the envelope existed carry no `schema` and are told apart by their keys, where they
are read (kttune.emit.markdown_report.classify, kttune.documents.describe).

A hardware profile keeps its own `format`/`version` pair as well (kttune.hw.profile): its schema
version is that version.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# doc -> version: every kind of document kttune writes
VERSIONS = {
    "search": 1,  # `kttune search --json`
    "explain": 1,  # `kttune explain --json` (flags, or a launch command: then with `launch`, `kttune_pick`)
    "search-measured": 1,  # `kttune search --measure --json`
    "simulate": 1,  # `kttune simulate --json`
    "paths": 1,  # `kttune paths --json/--out`
    "tune": 1,  # `kttune tune --json`, tune.json
    "tune-state": 1,  # tune's resume file (kttune.app.tuning.state; read back only with its own `version` and key)
    "validate": 1,  # `kttune validate --json`
    "profile": 1,  # hardware profiles (`kttune probe`, `calibrate`, `profile derive`, `validate`)
    "profiles": 1,  # `kttune profiles --json`
    "derive": 1,  # `kttune profile derive --json` (the summary)
    "gpus": 1,  # `kttune profile derive --gpu list --json` (the built-in GPU table)
    "report": 1,  # `kttune report --json` (what was written)
    "runner-rows": 1,  # a report's runs.json (path-runner rows, kttune.emit.markdown_report.runner_rows)
    "schedules": 1,  # a report's simulation*.json (kttune.emit.figures.fig_schedules's form)
}
_SCHEMA_RE = re.compile(r"^kttune\.([a-z0-9-]+)/([0-9]+)$")


def schema(doc: str) -> str:
    """`kttune.<doc>/<n>` of a document kind (KeyError for a kind not in VERSIONS)."""
    return f"kttune.{doc}/{VERSIONS[doc]}"


def enveloped(doc: str, body: dict) -> dict:
    """`body` with its schema first (a `schema` already in `body` is replaced)."""
    return {"schema": schema(doc), **{k: v for k, v in body.items() if k != "schema"}}


def doc_kind(document: Any) -> tuple[str, int] | None:
    """(doc, version) of a document carrying a kttune schema, else None (no envelope, or not
    kttune's)."""
    s = document.get("schema") if isinstance(document, dict) else None
    m = _SCHEMA_RE.match(s) if isinstance(s, str) else None
    return (m.group(1), int(m.group(2))) if m else None


def kttune_version() -> str:
    """The installed kttune's version (documents and reports carry it)."""
    try:
        return version("kttune")
    except PackageNotFoundError:
        return "unknown"
