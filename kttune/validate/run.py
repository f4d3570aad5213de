"""One validation run: launch the server with the emitted flags, wait until it serves, send the
prompts, read TTFT and KT's log lines, stop the server, compare with the prediction and (if asked)
write the corrections into the profile. Side effects live here and in kttune.validate.server."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.calibration.entries import Calibration
from kttune.hw.profile import HardwareProfile, save_profile
from kttune.net import free_port
from kttune.calibration.server import Comparison, PromptMeasurement, compare
from kttune.validate.logs import Failure, ServerLog, detect_failure, parse_layerwise, parse_log
from kttune.validate.plan import prompt_token_ids, server_argv
from kttune.validate.server import ServerRequestError, generate_ttft, launch, wait_ready

FAILURE_SETTLE_S = 10.0  # after a dropped request, how long to wait for the log to say why


@dataclass(frozen=True)
class ValidateRequest:
    emitted_argv: list[str]  # the launch command kttune emitted (kttune.search.launch.launch_argv)
    cfg: LaunchConfig
    lengths: tuple[int, ...]  # prompt lengths to send, in order (kttune.validate.plan.prompt_lengths)
    vocab_size: int
    timeout_s: float
    log_path: Path
    repeats: int = 2
    max_new_tokens: int = 1
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    python: str = sys.executable
    server_module: str = "sglang.launch_server"
    env: dict[str, str] = field(default_factory=dict)
    request_timeout_s: float = 1800.0


@dataclass(frozen=True)
class ValidationResult:
    ok: bool
    stage: str  # "startup" (failed starting), "prompts" (failed serving), "done"
    reason: str
    failure: Failure | None
    argv: list[str]
    log_path: str
    ready_s: float
    log: ServerLog
    measurements: tuple[PromptMeasurement, ...]
    chunk_prompt_tokens: int  # the prompt of exactly the chunk size (sent first)
    comparison: Comparison | None = None
    server_info: dict | None = None


def run_validation(
    req: ValidateRequest, comp: Components | None = None, on_event: Callable[[str, dict], None] | None = None
) -> ValidationResult:
    """Launch, measure, stop. The server is always stopped (its own process group, nothing else),
    whatever happens; `comp` given, the measurements are compared with its predictions."""
    emit = on_event or (lambda _k, _d: None)
    port = req.port or free_port(req.host)
    argv = server_argv(req.emitted_argv, req.python, req.server_module, req.host, port)
    server = launch(argv, req.log_path, req.env, req.host, port)
    emit("launched", {"argv": argv, "pgid": server.pgid, "log": str(req.log_path)})
    measurements: list[PromptMeasurement] = []
    stage, reason, failure, ready_s, info = "startup", "", None, 0.0, None
    try:
        rd = wait_ready(server, req.timeout_s, on_poll=lambda s: emit("waiting", {"s": s}))
        ready_s, info = rd.waited_s, rd.server_info
        if not rd.ready:
            reason, failure = rd.reason, rd.failure
        else:
            emit("ready", {"s": rd.waited_s})
            stage = "prompts"
            for i, length in enumerate(req.lengths):
                ttfts, records, reported = [], [], None
                for r in range(req.repeats):
                    ids = prompt_token_ids(length, req.vocab_size, seed=1000 * i + r)
                    before = server.log_size()
                    emit("prompt", {"tokens": length, "repeat": r})
                    try:
                        g = generate_ttft(req.host, port, ids, req.max_new_tokens, req.request_timeout_s)
                    except ServerRequestError as e:
                        failure = _settle_failure(server) or Failure("crash", str(e))
                        reason = f"the server failed on a {length}-token prompt: {failure.message}"
                        break
                    ttfts.append(g.ttft_ms)
                    reported = g.meta.get("prompt_tokens", reported)
                    records += parse_layerwise(server.log_text(before).splitlines())
                    emit("measured", {"tokens": length, "ttft_ms": g.ttft_ms})
                if ttfts:
                    measurements.append(PromptMeasurement(length, tuple(ttfts), tuple(records), reported))
                if failure is not None:
                    break
            else:
                stage = "done"
    finally:
        server.stop()
        emit("stopped", {"pgid": server.pgid})
    log = parse_log(server.log_text())
    res = ValidationResult(
        ok=failure is None and stage == "done",
        stage=stage,
        reason=reason,
        failure=failure,
        argv=argv,
        log_path=str(req.log_path),
        ready_s=ready_s,
        log=log,
        measurements=tuple(measurements),
        chunk_prompt_tokens=req.lengths[0] if req.lengths else 0,
        server_info=info,
    )
    if comp is not None and measurements:
        from dataclasses import replace

        res = replace(
            res,
            comparison=compare(
                comp, req.cfg, measurements, comp.model.name, datetime.now(timezone.utc).isoformat(timespec="seconds")
            ),
        )
    return res


def _settle_failure(server) -> Failure | None:
    """A request dropped: give the server a moment to log why (and usually exit)."""
    deadline = time.monotonic() + FAILURE_SETTLE_S
    while time.monotonic() < deadline:
        fail = detect_failure(server.log_text().splitlines())
        if fail is not None:
            return fail
        if not server.alive():
            return detect_failure(server.log_text().splitlines()) or Failure(
                "crash", f"the server exited with code {server.proc.returncode}"
            )
        time.sleep(0.1)
    return None


def write_corrections(profile: HardwareProfile, corrections: tuple[dict, ...], out: Path) -> Path:
    """Merge the server's entries into the profile's calibration list (replacing older server
    entries of the same method, path and model) and write it atomically."""
    from dataclasses import replace

    merged = Calibration.from_dicts(profile.calibration).with_server_entries(
        Calibration.from_dicts(corrections).entries
    )
    return save_profile(replace(profile, calibration=tuple(merged.to_dicts())), out)
