"""The discrete-event loop of one server under one schedule, streaming.

Time advances one iteration at a time; with nothing to run it jumps to the next arrival. Requests
come from a stream of chunks (kttune.sim.workload) and leave as events to a sink (`Sink`): each
finished or rejected request, each iteration's time with the decode tokens it carried, and the run's
totals at the end. The loop keeps only what is in flight: the requests waiting (compact chunks), the
running ones (a heap keyed by the iteration of a request's last token: every running request decodes
one token in every iteration, so that iteration is known when it starts decoding) and a monotonic
stack of iteration times from which a finishing request reads its longest gap. Its memory does not
grow with the request count; kttune.sim.metrics.Summary is the bounded-memory sink, `run` a
recording one that keeps everything (`Trace`, for tests and analysis).

Continuous batching, as sglang-kt runs it with `--enable-mixed-chunk` (docs/simulate.md):
- a request is admitted FIFO when `--max-running-requests` and the KV pool (`--max-total-tokens`)
  allow; it reserves prompt + output tokens of KV until it finishes (no preemption); a request that
  can never fit is rejected and fails its SLO;
- every admitted request past its prefill decodes one token per iteration;
- `chunked` / `hybrid` (`ChunkedPrefill`): each iteration prefills up to chunk - decode tokens (the
  mixed decode tokens take their share of the chunk budget), continuing the one partly prefilled
  request first, then admitting new ones; the whole forward (prefill + decode tokens) takes one
  path, layerwise when it has at least threshold tokens. `hybrid` is the same with the threshold at
  0 (kttune.sim.simulate.schedule_config);
- `layered` (`LayeredPrefill`, Layered Prefill): when no stage is in flight, up to `large_chunk`
  prompt tokens are taken (the last request possibly cut) and run through G layer groups, one group
  per iteration, while every running request decodes through all layers in each of those
  iterations; the prompts (or their large chunks) finish when the last group has run.
  G = max(1, ceil(T/512)) for T staged tokens (or fixed by the user). Each group's forward takes
  KT's per-forward path switch.
A request's first token comes at the end of the iteration that finishes its prefill; its next
tokens at the end of each following iteration, so its inter-token gaps are those iterations' times.
Decode-only stretches with nothing arriving or finishing run as one vectorised block.

Guards: every chunk is checked (finite, ordered arrivals; lengths in range) and every iteration time
must be finite and not negative, so no input can make the loop spin without advancing.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

import numpy as np

from kttune.config import LaunchConfig
from kttune.sim.costs import IterationCosts
from kttune.sim.workload import Request, RequestList, check_chunk

PROGRESS_EVERY = 4096  # requests between progress calls
LONG_RUN = 256  # decode-only iterations above which a stretch is summed with numpy


@dataclass(frozen=True)
class Schedule:
    name: str  # one of SCHEDULES
    groups: int | None = None  # layered: fixed G; None = the paper's rule
    large_chunk: int = 8192  # layered: prompt tokens staged at once
    group_tokens: int = 512  # layered: the rule's tokens per group

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "groups": self.groups,
            "large_chunk": self.large_chunk,
            "group_tokens": self.group_tokens,
        }


@dataclass(frozen=True)
class RunTotals:
    """What a run adds up, known at its end."""

    first_arrival_s: float
    end_s: float
    iterations: int
    gpu_busy_ms: float
    cpu_busy_ms: float
    traffic_prefill: tuple[float, float, float]  # (PCIe, HBM, host read) bytes, prefill share
    traffic_decode: tuple[float, float, float]
    prefill_gap_max_ms: float  # longest iteration that carried prefill work
    groups_used: dict[int, int] = field(default_factory=dict)  # layered: G -> stages run with it


class Planner(Protocol):
    """One schedule: what `serve` asks of it each iteration (docs/howto-add-a-schedule.md)."""

    groups_used: dict[int, int]

    @staticmethod
    def flags(cfg: LaunchConfig) -> LaunchConfig: ...

    def plan(self, take: Callable[[int], list], decode: int) -> tuple[list, int, int]: ...

    def finished(self, segs: list) -> list: ...


class Sink(Protocol):
    """Where a run's events go (kttune.sim.metrics.Summary, or the recorder behind `run`)."""

    def request(
        self,
        rid: int,
        arrival_s: float,
        prompt: int,
        output: int,
        first_token_s: float,
        finish_s: float,
        max_gap_ms: float,
        layer_loads: float,
    ) -> None: ...

    def rejected(self, rid: int, arrival_s: float, prompt: int, output: int) -> None: ...

    def iteration(self, ms: float, decode: int, prefill: int) -> None: ...

    def decode_run(self, first_ms: float, step_ms: float, count: int, decode: int) -> None:
        """`count` decode-only iterations of `decode` tokens each, taking first_ms + step_ms x j
        (j = 0 .. count - 1)."""

    def close(self, totals: RunTotals) -> None: ...


# ---- the schedules ---------------------------------------------------------------------------------
# Each is a planner (the `Planner` protocol): `flags(cfg)` the launch flags it runs with, `plan(take,
# decode)` the segments, layer-group count and group of the next forward, `finished(segs)` the
# requests whose prefill that forward completed, and `groups_used` (G -> stages, for the totals).
# A segment is (entry, tokens, prefix, completes): `tokens` prompt tokens of the request `entry`
# after `prefix` already prefilled; `completes` when they end its prompt.


class ChunkedPrefill:
    """SGLang's token-chunked prefill: one forward of up to chunk - decode prompt tokens per
    iteration, through every layer."""

    @staticmethod
    def flags(cfg: LaunchConfig) -> LaunchConfig:
        """The launch flags the schedule runs with (kttune.sim.simulate.schedule_config)."""
        return cfg

    def __init__(self, schedule: Schedule, costs: IterationCosts, cfg: LaunchConfig) -> None:
        self.chunk = cfg.chunked_prefill_size
        self.groups_used: dict[int, int] = {}

    def plan(self, take: Callable[[int], list], decode: int) -> tuple[list, int, int]:
        """(segments, layer groups, group) of the next forward."""
        return take(self.chunk - decode), 1, 0

    def finished(self, segs: list) -> list:
        """The requests whose prefill the forward just run completed."""
        return [e for e, _, _, c in segs if c]


class LayeredPrefill:
    """Layered Prefill: a staged batch of up to `large_chunk` prompt tokens runs one layer group per
    iteration; its prompts complete after the last group."""

    flags = staticmethod(ChunkedPrefill.flags)  # KT's flags as given: each group's forward takes its path switch

    def __init__(self, schedule: Schedule, costs: IterationCosts, cfg: LaunchConfig) -> None:
        self.schedule, self.costs = schedule, costs
        self.stage: list = []
        self.group, self.groups = 0, 1
        self.groups_used: dict[int, int] = {}

    def plan(self, take: Callable[[int], list], decode: int) -> tuple[list, int, int]:
        if not self.stage:
            self.stage = take(self.schedule.large_chunk)
            if self.stage:
                tokens = sum(s for _, s, _, _ in self.stage)
                g = self.schedule.groups or self.costs.group_count(tokens, self.schedule.group_tokens)
                self.groups = max(1, min(g, self.costs.num_layers))
                self.groups_used[self.groups] = self.groups_used.get(self.groups, 0) + 1
                self.group = 0
        return self.stage, self.groups, self.group

    def finished(self, segs: list) -> list:
        self.group += 1
        if self.group >= self.groups:
            done = [e for e, _, _, c in self.stage if c]
            self.stage = []
            return done
        return []


class HybridPrefill(ChunkedPrefill):
    """Token-chunked prefill with layerwise off (threshold 0): every forward takes the hybrid path."""

    @staticmethod
    def flags(cfg: LaunchConfig) -> LaunchConfig:
        return replace(cfg, gpu_prefill_token_threshold=0)


# The schedules by name: a new schedule is a class with `flags`, `plan`, `finished` and `groups_used`
# here (docs/howto-add-a-schedule.md).
PLANNERS: dict[str, type[Planner]] = {"chunked": ChunkedPrefill, "hybrid": HybridPrefill, "layered": LayeredPrefill}
SCHEDULES = tuple(PLANNERS)


# ---- the request queue -----------------------------------------------------------------------------
class _Queue:
    """Requests in arrival order, as compact chunks: those arrived and waiting (FIFO, from the
    admission cursor) and those yet to arrive (from the arrival cursor)."""

    def __init__(self, chunks, where: str) -> None:
        self._it, self._where = iter(chunks), where
        self._chunks: deque[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = (
            deque()
        )  # (first rid, arrivals, prompts, outputs)
        self._next_rid = 0
        self._last_s = 0.0
        self.first_arrival_s = math.nan
        # arrival cursor: chunk index (in _chunks), position, that chunk's arrivals as a list
        self._ac, self._ai, self._alist = 0, 0, []
        # admission cursor: always in _chunks[0]; that chunk's fields as lists
        self._wi = 0
        self._wlists: tuple[list, list, list] | None = None
        self.waiting = 0
        self.next_arrival_s = math.inf
        self._load_arrival_chunk()

    def _pull(self) -> bool:
        for arr, plen, olen in self._it:
            if arr.size == 0:
                continue
            check_chunk(arr, plen, olen, self._last_s, self._where)
            if self._next_rid == 0:
                self.first_arrival_s = float(arr[0])
            self._chunks.append((self._next_rid, arr, plen, olen))
            self._next_rid += arr.size
            self._last_s = float(arr[-1])
            return True
        return False

    def _load_arrival_chunk(self) -> None:
        while self._ac >= len(self._chunks):
            if not self._pull():
                self.next_arrival_s = math.inf
                return
        self._alist = self._chunks[self._ac][1].tolist()
        self._ai = 0
        self.next_arrival_s = self._alist[0]

    def arrive_until(self, t: float) -> None:
        """Every request arriving at or before t joins the waiting queue."""
        while self.next_arrival_s <= t:
            a, i = self._alist, self._ai
            n = len(a)
            j = i + 1
            while j < n and a[j] <= t:
                j += 1
            self.waiting += j - i
            if j < n:
                self._ai = j
                self.next_arrival_s = a[j]
                return
            self._ac += 1
            self._load_arrival_chunk()

    def head(self) -> tuple[int, float, int, int]:
        """(rid, arrival, prompt, output) of the first waiting request."""
        if self._wlists is None:
            _, arr, plen, olen = self._chunks[0]
            self._wlists = (arr.tolist(), plen.tolist(), olen.tolist())
        a, p, o = self._wlists
        i = self._wi
        return self._chunks[0][0] + i, a[i], p[i], o[i]

    def pop(self) -> None:
        self.waiting -= 1
        self._wi += 1
        if self._wi >= self._chunks[0][1].size:
            self._chunks.popleft()
            self._ac -= 1
            self._wi, self._wlists = 0, None


# ---- the loop --------------------------------------------------------------------------------------
RID, ARRIVAL, PROMPT, OUTPUT, DONE, LOADS = range(6)  # fields of a request entry (a list)


def serve(
    costs: IterationCosts,
    cfg: LaunchConfig,
    stream,
    schedule: Schedule,
    sink: Sink,
    on_progress: Callable[[int], None] | None = None,
) -> None:
    """Run `stream` (anything with `chunks()`, kttune.sim.workload) through one server under
    `schedule`, sending every event to `sink`. `on_progress(requests done)` every PROGRESS_EVERY."""
    if schedule.name not in PLANNERS:
        raise ValueError(f"unknown schedule {schedule.name!r}")
    for k, _ in costs.kv_terms:
        if not (math.isfinite(k) and k >= 0):
            raise ValueError(f"decode KV-read cost {k} ms per context token is not a finite non-negative time")
    planner = PLANNERS[schedule.name](schedule, costs, cfg)
    q = _Queue(stream.chunks(), f"requests of the {schedule.name} run")
    max_total = cfg.max_total_tokens
    kv_free = max_total
    max_running = max(1, cfg.max_running_requests)
    running = 0
    prefilling: deque[list] = deque()  # admitted, prompt not finished: entries
    finishes: list[tuple] = []  # heap of (last iteration, rid, entry, first decode iteration, first token time)
    joins: list[list] = []  # start decoding next iteration
    decode, sum_ctx = 0, 0.0
    t, it = 0.0, 0
    gpu_busy = cpu_busy = 0.0
    tp = [0.0, 0.0, 0.0]
    td = [0.0, 0.0, 0.0]
    pre_max = 0.0
    done, next_report = 0, PROGRESS_EVERY
    stk_it: list[int] = []  # monotonic stack: iterations whose time exceeds every later one's
    stk_ms: list[float] = []
    prune_at = 4096

    def push_gap(index: int, ms: float) -> None:
        while stk_ms and stk_ms[-1] <= ms:
            stk_ms.pop()
            stk_it.pop()
        stk_it.append(index)
        stk_ms.append(ms)

    def admit() -> bool:
        nonlocal kv_free, running, done
        while q.waiting:
            rid, a, p, o = q.head()
            need = p + o
            if need > max_total:  # never fits
                q.pop()
                sink.rejected(rid, a, p, o)
                done += 1
                continue
            if running >= max_running or need > kv_free:
                return False
            q.pop()
            kv_free -= need
            running += 1
            prefilling.append([rid, a, p, o, 0, 0.0])
            return True
        return False

    def take(budget: int) -> list:
        """Prompt segments for this forward: the partly prefilled request first, then new ones."""
        segs = []
        while budget > 0:
            if not prefilling and not admit():
                break
            e = prefilling[0]
            d = e[DONE]
            s = min(budget, e[PROMPT] - d)
            completes = d + s == e[PROMPT]
            segs.append((e, s, d, completes))
            budget -= s
            if completes:
                prefilling.popleft()
            else:
                e[DONE] = d + s
        return segs

    while True:
        q.arrive_until(t)
        if joins:
            for e in joins:
                decode += 1
                sum_ctx += e[PROMPT] + 1
            joins = []
        segs, groups, group = planner.plan(take, decode)
        if not segs and decode == 0:
            if q.next_arrival_s < math.inf:
                t = max(t, q.next_arrival_s)
                continue
            if q.waiting:  # cannot admit and nothing runs: only rejections remain
                admit()
                continue
            break
        if done >= next_report and on_progress is not None:
            on_progress(done)
            next_report = done + PROGRESS_EVERY
        if not segs and finishes[0][0] > it:
            # Decode only, and nothing changes before the next arrival or finish: run those
            # iterations at once (each is a + the KV read of the summed context, which grows by
            # `decode` a step: kd ms a step until a capped read reaches its cap, kv_growth).
            step = costs.decode(decode, sum_ctx)
            a = step.ms
            if not 0.0 <= a < math.inf:
                raise ValueError(f"the cost model gave a decode step of {a} ms ({decode} requests)")
            kd, linear = costs.kv_growth(decode, sum_ctx)  # each step is kd longer than the one before
            m = min(finishes[0][0] - it, linear)
            nxt = q.next_arrival_s
            acc, cnt = 0.0, m
            if m > LONG_RUN:  # numpy's cumsum adds in order too: the same sums
                ends = t + np.cumsum(a + kd * np.arange(m, dtype=float)) / 1e3
                if nxt != math.inf:
                    cnt = max(1, min(m, int(np.searchsorted(ends, nxt, side="left")) + 1))
                t = float(ends[cnt - 1])
            elif nxt == math.inf:
                for j in range(m):
                    acc += a + kd * j
                t = t + acc / 1e3
            else:  # stop after the iteration during which the next request arrives
                for j in range(m):
                    acc += a + kd * j
                    if t + acc / 1e3 >= nxt:
                        cnt = j + 1
                        break
                t = t + acc / 1e3
            if not t < math.inf:
                raise ValueError("simulated time overflowed")
            sink.decode_run(a, kd, cnt, decode)
            push_gap(it + cnt - 1, a + kd * (cnt - 1))
            gpu_busy += cnt * step.gpu_ms + kd * cnt * (cnt - 1) / 2
            cpu_busy += cnt * step.cpu_ms
            td[0] += cnt * step.pcie_bytes
            td[1] += cnt * step.hbm_bytes
            td[2] += cnt * step.host_bytes
            sum_ctx += decode * cnt
            it += cnt
            continue
        ptoks = sum(s for _, s, _, _ in segs)
        step = costs.forward([(s, d) for _, s, d, _ in segs], decode, sum_ctx, groups, group)
        ms = step.ms
        if not 0.0 <= ms < math.inf:
            raise ValueError(f"the cost model gave an iteration of {ms} ms ({ptoks} prompt and {decode} decode tokens)")
        t += ms / 1e3
        sink.iteration(ms, decode, ptoks)
        push_gap(it, ms)
        gpu_busy += step.gpu_ms
        cpu_busy += step.cpu_ms
        share = ptoks / (ptoks + decode) if ptoks else 0.0
        for k, v in enumerate((step.pcie_bytes, step.hbm_bytes, step.host_bytes)):
            tp[k] += v * share
            td[k] += v * (1.0 - share)
        if ptoks:
            pre_max = max(pre_max, ms)
            if step.layerwise_layers:
                for e, s, _, _ in segs:
                    e[LOADS] += step.layerwise_layers * s / ptoks
        # ---- prompts that finished prefill this iteration
        for e in planner.finished(segs):
            o = e[OUTPUT]
            if o <= 1:
                kv_free += e[PROMPT] + o
                running -= 1
                done += 1
                sink.request(e[RID], e[ARRIVAL], e[PROMPT], o, t, t, 0.0, e[LOADS])
            else:
                heapq.heappush(finishes, (it + o - 1, e[RID], e, it + 1, t))
                joins.append(e)
        # ---- decode tokens of this iteration
        sum_ctx += decode
        while finishes and finishes[0][0] == it:
            _, _, e, start, first = heapq.heappop(finishes)
            gap = stk_ms[bisect_left(stk_it, start)]
            p, o = e[PROMPT], e[OUTPUT]
            decode -= 1
            sum_ctx -= p + o
            kv_free += p + o
            running -= 1
            done += 1
            sink.request(e[RID], e[ARRIVAL], p, o, first, t, gap, e[LOADS])
        if len(stk_it) > prune_at:  # drop what no running request can ask for
            oldest = min((f[3] for f in finishes), default=it + 1)
            keep = bisect_left(stk_it, oldest)
            del stk_it[:keep], stk_ms[:keep]
            prune_at = max(4096, 2 * len(stk_it))
        it += 1

    if on_progress is not None:
        on_progress(done)
    sink.close(
        RunTotals(
            q.first_arrival_s, t, it, gpu_busy, cpu_busy, tuple(tp), tuple(td), pre_max, dict(planner.groups_used)
        )
    )


# ---- a recording run (everything in memory) --------------------------------------------------------
@dataclass
class Trace:
    """Raw outcome of one run, every request and iteration kept (numpy arrays, by arrival)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_token_s: np.ndarray  # nan when rejected
    finish_s: np.ndarray
    max_gap_ms: np.ndarray  # 0 when the request made one token; nan when rejected
    rejected: np.ndarray  # bool
    iter_ms: np.ndarray  # every iteration's time
    iter_decode: np.ndarray  # decode tokens per iteration (the weight of its gap)
    iter_prefill: np.ndarray  # prefill tokens per iteration
    prefill_gap_max_ms: float  # longest iteration that carried prefill work
    end_s: float
    gpu_busy_ms: float
    cpu_busy_ms: float
    traffic_prefill: tuple[float, float, float]  # (PCIe, HBM, host read) bytes, prefill share
    traffic_decode: tuple[float, float, float]
    layer_loads: np.ndarray  # per request: layerwise MoE-layer loads attributed to its prompt
    groups_used: dict[int, int]  # layered: G -> stages run with it


class _Recorder:
    def __init__(self) -> None:
        self.rows: dict[int, tuple] = {}
        self.ms: list = []
        self.dec: list = []
        self.pre: list = []
        self.totals: RunTotals | None = None

    def request(self, rid, arrival_s, prompt, output, first_token_s, finish_s, max_gap_ms, layer_loads) -> None:
        self.rows[rid] = (arrival_s, prompt, output, first_token_s, finish_s, max_gap_ms, False, layer_loads)

    def rejected(self, rid, arrival_s, prompt, output) -> None:
        self.rows[rid] = (arrival_s, prompt, output, math.nan, math.nan, math.nan, True, 0.0)

    def iteration(self, ms, decode, prefill) -> None:
        self.ms.append(np.array([ms]))
        self.dec.append(np.array([decode], dtype=np.int64))
        self.pre.append(np.array([prefill], dtype=np.int64))

    def decode_run(self, first_ms, step_ms, count, decode) -> None:
        self.ms.append(first_ms + step_ms * np.arange(count, dtype=float))
        self.dec.append(np.full(count, decode, dtype=np.int64))
        self.pre.append(np.zeros(count, dtype=np.int64))

    def close(self, totals: RunTotals) -> None:
        self.totals = totals

    def trace(self) -> Trace:
        rows = [self.rows[i] for i in range(len(self.rows))]
        cols = list(zip(*rows)) if rows else [()] * 8
        tot = self.totals

        def cat(parts, dtype):
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        return Trace(
            np.array(cols[0], dtype=float),
            np.array(cols[1], dtype=np.int64),
            np.array(cols[2], dtype=np.int64),
            np.array(cols[3], dtype=float),
            np.array(cols[4], dtype=float),
            np.array(cols[5], dtype=float),
            np.array(cols[6], dtype=bool),
            cat(self.ms, float),
            cat(self.dec, np.int64),
            cat(self.pre, np.int64),
            tot.prefill_gap_max_ms,
            tot.end_s,
            tot.gpu_busy_ms,
            tot.cpu_busy_ms,
            tot.traffic_prefill,
            tot.traffic_decode,
            np.array(cols[7], dtype=float),
            tot.groups_used,
        )


def run(costs: IterationCosts, cfg: LaunchConfig, requests, schedule: Schedule) -> Trace:
    """One run with every request and iteration recorded (`requests`: a list of Request or a stream)."""
    stream = RequestList(tuple(requests)) if isinstance(requests, (list, tuple)) else requests
    rec = _Recorder()
    serve(costs, cfg, stream, schedule, rec)
    return rec.trace()


__all__ = [
    "SCHEDULES",
    "Schedule",
    "Sink",
    "RunTotals",
    "ChunkedPrefill",
    "HybridPrefill",
    "LayeredPrefill",
    "serve",
    "run",
    "Trace",
    "Request",
]
