"""A `RunnerSession` in a child process (spawned): its memory, kt-kernel's never-freed layers
included, goes back to the system when the worker ends; a crash inside kt-kernel or CUDA ends the
worker, not the caller; Ctrl-C in the caller ends it (the child ignores SIGINT and is stopped by
its parent). The worker answers calls over a pipe; what it prints natively (kt-kernel's printf)
goes to /dev/null, its Python errors come back as exceptions of the same kind.

    with SessionWorker(SessionSpec(model="qwen3-30b-a3b", threads=(11, 13))) as w:
        run = w.sample(RunnerConfig(32, 8192, 2048, 13), 4096)     # a PathRun
        w.memory()                                                  # the child's memory

Methods: `sample`, `warm`, `skip_reason`, `paths_agree`, `memory`, `info` (those of RunnerSession).
"""

from __future__ import annotations

import time
from typing import Any

from kttune.errors import error_report, reraise
from kttune.probes.common import detach_child
from kttune.runner.session import RunnerConfig, SessionSpec

_CALLS = ("sample", "warm", "skip_reason", "paths_agree", "memory", "info", "plan")


def _serve(conn: Any, spec: SessionSpec) -> None:
    detach_child()  # Ctrl-C is the parent's; kt-kernel's printf (construction, pools, farewell) to /dev/null
    try:
        from kttune.runner.session import RunnerSession

        session = RunnerSession(spec)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", *error_report(e)))
        return
    conn.send(("ok", session.info()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        name, args, kwargs = msg
        if name == "close":
            break
        try:
            conn.send(("ok", getattr(session, name)(*args, **kwargs)))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            conn.send(("error", *error_report(e)))
    try:
        session.close()
    finally:
        conn.close()


class SessionWorker:
    """The parent's handle on a worker: `start()` (or the constructor with start=True) spawns it
    and waits until the session is built; each call blocks until the answer comes."""

    def __init__(self, spec: SessionSpec, start: bool = True, timeout_s: float = 1800.0) -> None:
        self.spec, self.timeout_s = spec, timeout_s
        self._proc = None
        self._conn = None
        self.info_at_start: dict = {}
        self.start_s = 0.0
        if start:
            self.start()

    def start(self) -> dict:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        t0 = time.perf_counter()
        self._proc = ctx.Process(target=_serve, args=(child, self.spec), daemon=True, name="kttune-runner")
        self._proc.start()
        child.close()
        self._conn = parent
        self.info_at_start = self._answer()
        self.start_s = time.perf_counter() - t0
        return self.info_at_start

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _answer(self) -> Any:
        deadline = time.monotonic() + self.timeout_s
        while not self._conn.poll(0.2):
            if not self._proc.is_alive():
                code = self._proc.exitcode
                self._proc = None
                raise RuntimeError(f"runner worker ended (exit code {code}) without an answer")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"runner worker gave no answer within {self.timeout_s:.0f} s")
        try:
            status, *rest = self._conn.recv()
        except EOFError:
            self.close()
            raise RuntimeError("runner worker ended without an answer (see its error above)") from None
        if status == "ok":
            return rest[0]
        reraise(*rest, who="runner worker")

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name not in _CALLS:
            raise AttributeError(name)
        if not self.alive():
            raise RuntimeError("runner worker is not running")
        self._conn.send((name, args, kwargs))
        return self._answer()

    def __getattr__(self, name: str) -> Any:
        if name in _CALLS:
            return lambda *a, **k: self.call(name, *a, **k)
        raise AttributeError(name)

    def close(self, timeout_s: float = 60.0) -> None:
        """End the worker (its memory goes with it). Safe to call twice."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        try:
            if proc.is_alive():
                conn.send(("close", (), {}))
                proc.join(timeout_s)
        except (OSError, EOFError, BrokenPipeError):
            pass
        if proc.is_alive():
            proc.terminate()
            proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        if conn is not None:
            conn.close()

    def __enter__(self) -> "SessionWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten worker must not outlive its parent's interest
        try:
            self.close(timeout_s=5)
        except Exception:  # noqa: BLE001
            pass


def worker_memory(worker: SessionWorker) -> dict:
    """The worker's memory as the system sees it (psutil), beside what it reports itself."""
    import psutil

    out = {"worker_pid": worker.pid}
    if worker.pid is not None:
        try:
            out["worker_rss_bytes"] = psutil.Process(worker.pid).memory_info().rss
        except psutil.Error:
            pass
    return out


__all__ = ["RunnerConfig", "SessionSpec", "SessionWorker", "worker_memory"]
