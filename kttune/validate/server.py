"""The edge of validation: a server process and its HTTP API. Standard library only.

- `launch` starts `python -m sglang.launch_server <flags>` in a process group of its own (a new
  session), logging to a file; `ServerProcess.stop` signals that group and nothing else.
- `wait_ready` polls `/health` (503 while SGLang starts, 200 once it serves), then reads
  `/server_info` (`/get_server_info` on older servers), and gives up on a timeout, on the process
  exiting, or on a failure line in the log (kttune.validate.logs).
- `generate_ttft` sends one prompt as token ids to `/generate` with streaming on and times the first
  streamed chunk (TTFT) and the whole request.

SGLang's HTTP API as used here is described in docs/validate.md.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kttune.validate.logs import Failure, detect_failure


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    pgid: int  # the process group this launch created (== proc.pid)
    log_path: Path
    host: str
    port: int
    argv: list[str] = field(default_factory=list)

    def log_text(self, start: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the group this launch created, SIGKILL to what is left after `grace_s`. The
        group is the server and the processes it spawned (SGLang's scheduler, detokenizer and TP
        workers inherit it); no other process is signalled."""
        if self.pgid <= 1 or self.pgid == os.getpgrp():
            raise RuntimeError(f"refusing to signal process group {self.pgid}: not one this launch created")
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                self.proc.poll()
                if not _group_alive(self.pgid):
                    break
                time.sleep(0.05)
            if not _group_alive(self.pgid):
                break
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. A zombie (exited, not yet reaped by whoever
    inherited it) does not count; /proc tells them apart on Linux, else any member counts."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc"):
        return True
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            return True
    return False


def launch(
    argv: list[str], log_path: Path, env: dict[str, str] | None = None, host: str = "127.0.0.1", port: int = 0
) -> ServerProcess:
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as logf:  # a fresh log per launch: an old failure must not count
        proc = subprocess.Popen(
            argv,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    return ServerProcess(proc=proc, pgid=proc.pid, log_path=log_path, host=host, port=port, argv=list(argv))


# ---- HTTP ------------------------------------------------------------------------------------


class ServerRequestError(Exception):
    """The server answered a request with an error, or dropped the connection."""


def http_get_json(host: str, port: int, path: str, timeout_s: float = 5.0) -> tuple[int, dict | None]:
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        try:
            data = json.loads(body) if body else None
        except json.JSONDecodeError:
            data = None
        return resp.status, data if isinstance(data, dict) else None
    finally:
        conn.close()


@dataclass(frozen=True)
class Readiness:
    ready: bool
    waited_s: float
    failure: Failure | None = None
    reason: str = ""
    server_info: dict | None = None


def wait_ready(
    server: ServerProcess, timeout_s: float, poll_s: float = 0.5, on_poll: Callable[[float], None] | None = None
) -> Readiness:
    t0 = time.monotonic()
    while True:
        waited = time.monotonic() - t0
        if on_poll:
            on_poll(waited)
        fail = detect_failure(server.log_text().splitlines())
        if fail is not None:
            return Readiness(False, waited, fail, f"the server failed while starting: {fail.message}")
        if not server.alive():
            code = server.proc.returncode
            fail = detect_failure(server.log_text().splitlines()) or Failure(
                "crash", f"the server exited with code {code}"
            )
            return Readiness(False, waited, fail, f"the server exited with code {code} while starting")
        try:
            status, _ = http_get_json(server.host, server.port, "/health", timeout_s=max(1.0, poll_s * 4))
        except OSError:
            status = None
        if status == 200:
            info = None
            for path in ("/server_info", "/get_server_info"):
                try:
                    st, info = http_get_json(server.host, server.port, path, timeout_s=10.0)
                except OSError:
                    st = None
                if st == 200:
                    break
                info = None
            return Readiness(True, time.monotonic() - t0, server_info=info)
        if waited >= timeout_s:
            return Readiness(False, waited, None, f"the server was not ready after {timeout_s:.0f} s")
        time.sleep(poll_s)


@dataclass(frozen=True)
class GenerateTiming:
    prompt_tokens: int
    ttft_ms: float  # request sent -> first streamed chunk
    total_ms: float
    meta: dict


def generate_ttft(
    host: str, port: int, input_ids: list[int], max_new_tokens: int = 1, timeout_s: float = 600.0
) -> GenerateTiming:
    body = json.dumps(
        {
            "input_ids": input_ids,
            "stream": True,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0, "ignore_eos": True},
        }
    )
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    t0 = time.perf_counter()
    ttft = None
    meta: dict = {}
    try:
        conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ServerRequestError(f"/generate answered HTTP {resp.status}: {resp.read()[:300]!r}")
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            obj = json.loads(payload)
            if isinstance(obj, dict) and "error" in obj:
                raise ServerRequestError(f"/generate streamed an error: {obj['error']}")
            if ttft is None:
                ttft = (time.perf_counter() - t0) * 1e3
            meta = obj.get("meta_info", meta) if isinstance(obj, dict) else meta
    except (OSError, http.client.HTTPException, json.JSONDecodeError) as e:
        raise ServerRequestError(f"/generate failed: {type(e).__name__}: {e}") from None
    finally:
        conn.close()
    if ttft is None:
        raise ServerRequestError("/generate closed the stream before the first token")
    return GenerateTiming(len(input_ids), ttft, (time.perf_counter() - t0) * 1e3, meta)
