"""A probe step in a spawned child process, so that what kt-kernel cannot free goes back to the system
when the step ends. kt-kernel 0.7.2 never frees an AMX-family layer's packed weights
(docs/path-runner.md#kt-kernels-amx-layers-are-never-freed), and stage A builds one writer layer per
method, expert size and thread count, each cycling over two or four times the last-level cache: in
the probe's own process they would all stay until kttune exits, beside the host RAM step, the GPU
suite and `kttune tune`'s runner workers.

The child runs `fn(*args, reporter=..., **kwargs)` (a module-level function, its arguments and
result picklable); its progress and notes come back over a pipe to the caller's reporter as they
happen, its Python error comes back as the same kind (`kttune.errors.reraise`), what it prints natively
(kt-kernel's printf) goes to /dev/null, and Ctrl-C in the caller stops it (the child ignores SIGINT).
The caller's CPU load monitor counts the child's CPU time as the probe's own once it is joined.
`packed` groups a step's parts (stage A's methods, a model's CPU MoE layers) so that each child keeps
at most `child_bytes_bound()`: one process start per group, not per part.

    curves = run_isolated(probe_stage_a, opts, cpu, reporter=rep, cores=16, numa_ids=[0], plan=plan)
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

from kttune.errors import error_report, reraise
from kttune.probes.common import detach_child

T = TypeVar("T")

# What one child may leave behind: this share of the RAM available when the step starts. The parts of
# a step are packed into as few children as that allows, since each child starts Python, torch and
# kt-kernel again (docs/probe.md#stage-a-writes-from-a-cold-source).
CHILD_RAM_SHARE = 0.25


def child_bytes_bound() -> int:
    """Bytes of kept layers one child may gather: CHILD_RAM_SHARE of the RAM available now."""
    from kttune.probes.cpu_moe import available_ram_bytes

    return int(available_ram_bytes() * CHILD_RAM_SHARE)


def packed(parts: Sequence[T], size: Callable[[T], int], bound: int) -> list[list[T]]:
    """`parts` in order, in groups of consecutive parts whose sizes sum to at most `bound`; a part
    larger than `bound` is a group of its own."""
    groups: list[list[T]] = []
    total = 0
    for part in parts:
        n = size(part)
        if groups and total + n <= bound:
            groups[-1].append(part)
            total += n
        else:
            groups.append([part])
            total = n
    return groups


class _PipeReporter:
    """The child's reporter: each call goes to the parent as it happens."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.notes: list[str] = []

    def plan(self, total_steps: int, title: str) -> None:
        self.conn.send(("plan", total_steps, title))

    def step(self, description: str, advance: float = 1.0) -> None:
        self.conn.send(("step", description, advance))

    def note(self, message: str) -> None:
        self.notes.append(message)
        self.conn.send(("note", message))


def _serve(conn: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    detach_child()
    try:
        result = fn(*args, reporter=_PipeReporter(conn), **kwargs)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        conn.send(("error", *error_report(e)))
    else:
        conn.send(("done", result))
    finally:
        conn.close()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        return f"was killed by signal {-code}" + (" (the system may have run out of memory)" if code == -9 else "")
    return f"ended (exit code {code})"


def run_isolated(fn: Callable[..., Any], *args: Any, reporter: Any, **kwargs: Any) -> Any:
    """`fn(*args, reporter=reporter, **kwargs)`, run in a spawned child; its result."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    name = getattr(fn, "__name__", "probe step")
    proc = ctx.Process(target=_serve, args=(child, fn, args, kwargs), daemon=True, name=f"kttune-{name}")
    proc.start()
    child.close()
    try:
        while True:
            try:
                kind, *rest = parent.recv()
            except EOFError:
                proc.join()
                raise RuntimeError(f"{name}: its process {_ended(proc.exitcode)} without a result") from None
            if kind == "done":
                proc.join()
                return rest[0]
            if kind == "error":
                proc.join()
                reraise(*rest, who=name)
            getattr(reporter, kind)(*rest)
    finally:
        if proc.is_alive():  # Ctrl-C or an error in the parent: the child goes with it
            proc.terminate()
            proc.join(10)
        parent.close()
