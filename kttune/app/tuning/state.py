"""What a `kttune tune` run has measured, on disk after every sample, so that Ctrl-C loses nothing
and the same command resumes: samples by phase and item (round, value, outlier flag), and the
results of finished steps (the probe's outcome, the calibration). Written whole or not at all
(kttune.paths.replace_atomically). A state whose key differs from the request's (another model,
budget, workload, version) is not reused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kttune.schema import schema

STATE_VERSION = 1


class TuneState:
    def __init__(self, path: Path | None, key: str, fresh: bool = False) -> None:
        self.path, self.key = path, key
        self.resumed = False
        self.data: dict = {
            "schema": schema("tune-state"),
            "version": STATE_VERSION,
            "key": key,
            "samples": {},
            "results": {},
        }
        if path is not None and path.is_file() and not fresh:
            try:
                d = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                d = {}
            if d.get("version") == STATE_VERSION and d.get("key") == key:
                self.data = d
                self.resumed = bool(d.get("samples") or d.get("results"))

    def samples(self, phase: str) -> dict[str, list[tuple[int, float, str | None]]]:
        return {k: [(int(r), float(v), f) for r, v, f in vs] for k, vs in self.data["samples"].get(phase, {}).items()}

    def count(self) -> int:
        return sum(len(vs) for ph in self.data["samples"].values() for vs in ph.values())

    def add(self, phase: str, item: str, round_index: int, value: float, flag: str | None = None) -> None:
        self.data["samples"].setdefault(phase, {}).setdefault(item, []).append([round_index, value, flag])
        self.save()

    def get(self, name: str, default: Any = None) -> Any:
        return self.data["results"].get(name, default)

    def put(self, name: str, value: Any) -> None:
        self.data["results"][name] = value
        self.save()

    def save(self) -> None:
        if self.path is None:
            return
        from kttune.paths import replace_atomically

        text = json.dumps(self.data, default=str)
        replace_atomically(self.path, lambda tmp: Path(tmp).write_text(text))
