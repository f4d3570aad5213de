"""Reading an sglang-kt 0.7.2 server log: the memory lines printed at start-up, KT's layerwise
timing lines, readiness, and the exact messages of an out-of-memory or a crash. Pure (text in,
frozen dataclasses out; no torch, no I/O).

Every pattern matches a message whose format is quoted, with its source file, in docs/validate.md.
A line looks like `[2026-07-15 12:00:00 TP0] <message>` (SGLang's `configure_logger`); the prefix is
optional here, so a message is matched wherever it sits in a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

_NUM = r"(-?\d+(?:\.\d+)?)"

# --- start-up memory (model_runner.py, memory_pool.py, model_runner_kv_cache_mixin.py, scheduler.py)
LOAD_WEIGHT_END = re.compile(r"Load weight end\..*?avail mem=" + _NUM + r" GB, mem usage=" + _NUM + r" GB")
KV_ALLOCATED_MLA = re.compile(r"KV Cache is allocated\. #tokens: (\d+), KV size: " + _NUM + r" GB")
KV_ALLOCATED_KV = re.compile(
    r"KV Cache is allocated\. #tokens: (\d+), K size: " + _NUM + r" GB, V size: " + _NUM + r" GB"
)
MEMORY_POOL_END = re.compile(r"Memory pool end\. avail mem=" + _NUM + r" GB")
SCHEDULER_SIZES = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+), available_(?:gpu|cpu)_mem=" + _NUM + r" GB"
)
CUDA_GRAPH_END = re.compile(
    r"Capture (?:piecewise )?(?:cuda|CUDA) graph end\..*?mem usage=" + _NUM + r" GB\. avail mem=" + _NUM + r" GB"
)
READY = re.compile(r"The server is fired up and ready to roll!")

# --- KT layerwise prefill (kt_ep_wrapper.py), rank 0 only
KT_PREPARE = re.compile(r"KT layerwise prefill: layer (\d+) prepare weight = " + _NUM + r" ms")
KT_COMPUTE = re.compile(
    r"KT layerwise prefill: layer (\d+) compute = " + _NUM + r" ms(?:, expert update = " + _NUM + r" ms)?"
)

# --- failures
# torch's caching allocator (c10/cuda/CUDACachingAllocator.cpp), raised as torch.OutOfMemoryError
# (torch.cuda.OutOfMemoryError before torch 2.5)
CUDA_OOM = re.compile(
    r"(?:torch\.(?:cuda\.)?)?OutOfMemoryError: CUDA out of memory\. Tried to allocate ([\d.]+ [KMGT]?i?B)"
)
# SGLang's KV sizing when nothing is left for the pool (model_runner_kv_cache_mixin.py)
NOT_ENOUGH_MEMORY = re.compile(r"RuntimeError: Not enough memory\. Please try to increase --mem-fraction-static")
SCHEDULER_EXCEPTION = re.compile(r"Scheduler hit an exception: ")
CHILD_FAILED = re.compile(r"Received sigquit from a child process\. It usually means the child failed\.")
# the last line of a Python traceback: "SomeError: message"
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.*)$")


@dataclass(frozen=True)
class StartupMemory:
    """What the server said about its memory while starting. SGLang prints "GB" but divides bytes
    by 1 << 30 (`get_available_gpu_memory`), so the numbers are GiB."""

    weights_avail_gib: float | None = None  # free after loading weights
    weights_usage_gib: float | None = None  # what the weights took
    kv_tokens: int | None = None  # tokens of the KV pool allocated
    kv_gib: float | None = None
    pool_end_avail_gib: float | None = None  # free after the memory pools
    graph_usage_gib: float | None = None
    graph_end_avail_gib: float | None = None  # free after CUDA graphs: the runtime headroom
    max_total_num_tokens: int | None = None
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    context_len: int | None = None
    available_gpu_mem_gib: float | None = None


@dataclass(frozen=True)
class LayerwiseRecord:
    """One `KT layerwise prefill` line: which layer, and what it measured (ms)."""

    layer: int
    kind: str  # "prepare" | "compute"
    ms: float
    expert_update_ms: float | None = None


@dataclass(frozen=True)
class Failure:
    """Why the server failed: `oom` (CUDA allocator), `kv_oom` (no memory left for the KV pool at
    start-up) or `crash` (any other exception in a server process)."""

    kind: str
    message: str  # the line that says it
    alloc: str | None = None  # "8.86 GiB" for a CUDA OOM


@dataclass(frozen=True)
class ServerLog:
    startup: StartupMemory
    layerwise: tuple[LayerwiseRecord, ...] = ()
    ready: bool = False
    failure: Failure | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def prepare_ms(self) -> list[float]:
        return [r.ms for r in self.layerwise if r.kind == "prepare"]

    def compute_ms(self) -> list[float]:
        return [r.ms for r in self.layerwise if r.kind == "compute"]


def parse_layerwise(lines: Iterable[str]) -> tuple[LayerwiseRecord, ...]:
    out = []
    for line in lines:
        m = KT_PREPARE.search(line)
        if m:
            out.append(LayerwiseRecord(int(m.group(1)), "prepare", float(m.group(2))))
            continue
        m = KT_COMPUTE.search(line)
        if m:
            upd = float(m.group(3)) if m.group(3) is not None else None
            out.append(LayerwiseRecord(int(m.group(1)), "compute", float(m.group(2)), upd))
    return tuple(out)


def parse_startup(lines: Iterable[str]) -> StartupMemory:
    d: dict = {}
    for line in lines:
        if m := LOAD_WEIGHT_END.search(line):
            d.update(weights_avail_gib=float(m.group(1)), weights_usage_gib=float(m.group(2)))
        elif m := KV_ALLOCATED_KV.search(line):
            d.update(kv_tokens=int(m.group(1)), kv_gib=float(m.group(2)) + float(m.group(3)))
        elif m := KV_ALLOCATED_MLA.search(line):
            d.update(kv_tokens=int(m.group(1)), kv_gib=float(m.group(2)))
        elif m := MEMORY_POOL_END.search(line):
            d.update(pool_end_avail_gib=float(m.group(1)))
        elif m := CUDA_GRAPH_END.search(line):
            d.update(graph_usage_gib=float(m.group(1)), graph_end_avail_gib=float(m.group(2)))
        elif m := SCHEDULER_SIZES.search(line):
            d.update(
                max_total_num_tokens=int(m.group(1)),
                chunked_prefill_size=int(m.group(2)),
                max_running_requests=int(m.group(4)),
                context_len=int(m.group(5)),
                available_gpu_mem_gib=float(m.group(6)),
            )
    return StartupMemory(**d)


def detect_failure(lines: Iterable[str]) -> Failure | None:
    """The first failure the log shows, classified by exact messages (never a bare substring such as
    "oom", which matches "room" or "bloom"). A CUDA OOM anywhere wins over the generic crash lines
    that follow it (the scheduler's exception line, the parent's SIGQUIT line)."""
    crash: Failure | None = None
    exception_after_crash: str | None = None
    for line in lines:
        if m := CUDA_OOM.search(line):
            return Failure("oom", line.strip(), m.group(1))
        if NOT_ENOUGH_MEMORY.search(line):
            return Failure("kv_oom", line.strip())
        s = line.strip()
        if crash is None and (SCHEDULER_EXCEPTION.search(line) or CHILD_FAILED.search(line)):
            crash = Failure("crash", s)
        elif crash is not None and exception_after_crash is None and _EXCEPTION_LINE.match(s):
            exception_after_crash = s  # the traceback's last line names the error
    if crash is not None and exception_after_crash is not None:
        return Failure("crash", exception_after_crash)
    return crash


def parse_log(text: str) -> ServerLog:
    lines = text.splitlines()
    return ServerLog(
        startup=parse_startup(lines),
        layerwise=parse_layerwise(lines),
        ready=any(READY.search(x) for x in lines),
        failure=detect_failure(lines),
    )
