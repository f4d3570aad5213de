"""The discrete-event loop of one server under one schedule.

Time advances one iteration at a time; with nothing to run it jumps to the next arrival. Events
are the sorted arrivals (a pointer) and the decode finishes (a heap keyed by the iteration of a
request's last token: every running request decodes one token in every iteration, so that
iteration is known when it starts decoding). The per-iteration work is O(1) apart from admissions,
so 10,000 requests take a few seconds (benchmarks/bench_simulate.py).

Continuous batching, as sglang-kt runs it with `--enable-mixed-chunk` (docs/simulate.md):
- a request is admitted FIFO when `--max-running-requests` and the KV pool (`--max-total-tokens`)
  allow; it reserves prompt + output tokens of KV until it finishes (no preemption); a request that
  can never fit is rejected and fails its SLO;
- every admitted request past its prefill decodes one token per iteration;
- `chunked` / `hybrid`: each iteration prefills up to chunk - decode tokens (the mixed decode tokens
  take their share of the chunk budget), continuing the one partly prefilled request first, then
  admitting new ones; the whole forward (prefill + decode tokens) takes one path, layerwise when it
  has at least threshold tokens. `hybrid` is the same with the threshold at 0;
- `layered` (Layered Prefill): when no stage is in flight, up to `large_chunk` prompt tokens are
  taken (the last request possibly cut) and run through G layer groups, one group per iteration,
  while every running request decodes through all layers in each of those iterations; the prompts
  (or their large chunks) finish when the last group has run. G = max(1, ceil(T/512)) for T staged
  tokens (or fixed by the user). Each group's forward takes KT's per-forward path switch.
A request's first token comes at the end of the iteration that finishes its prefill; its next
tokens at the end of each following iteration, so its inter-token gaps are those iterations' times.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from kttune.config import LaunchConfig
from kttune.sim.costs import IterationCosts
from kttune.sim.workload import Request

SCHEDULES = ("chunked", "hybrid", "layered")


@dataclass(frozen=True)
class Schedule:
    name: str  # one of SCHEDULES
    groups: int | None = None  # layered: fixed G; None = the paper's rule
    large_chunk: int = 8192  # layered: prompt tokens staged at once
    group_tokens: int = 512  # layered: the rule's tokens per group

    def to_dict(self) -> dict:
        return {"name": self.name, "groups": self.groups, "large_chunk": self.large_chunk, "group_tokens": self.group_tokens}


@dataclass
class Trace:
    """Raw outcome of one run (numpy arrays; kttune.sim.metrics turns it into results)."""

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


def run(costs: IterationCosts, cfg: LaunchConfig, requests: list[Request], schedule: Schedule) -> Trace:
    if schedule.name not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule.name!r}")
    n = len(requests)
    reqs = sorted(requests, key=lambda r: r.arrival_s)
    arr = np.array([r.arrival_s for r in reqs], dtype=float)
    plen = np.array([r.prompt_tokens for r in reqs], dtype=np.int64)
    olen = np.array([r.output_tokens for r in reqs], dtype=np.int64)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    start_it = np.full(n, -1, dtype=np.int64)
    end_it = np.full(n, -1, dtype=np.int64)
    rejected = np.zeros(n, dtype=bool)
    loads = np.zeros(n)

    layered = schedule.name == "layered"
    chunk = cfg.chunked_prefill_size
    kv_free = cfg.max_total_tokens
    max_running = max(1, cfg.max_running_requests)
    running = 0
    waiting: deque[int] = deque()
    prefilling: deque[list[int]] = deque()  # [request index, tokens done]
    finishes: list[tuple[int, int]] = []  # (last iteration, request index)
    joins: list[int] = []  # start decoding next iteration
    decode, sum_ctx = 0, 0.0
    t, it, ptr = 0.0, 0, 0
    iter_ms: list[float] = []
    iter_dec: list[int] = []
    iter_pre: list[int] = []
    gpu_busy = cpu_busy = 0.0
    tp = [0.0, 0.0, 0.0]
    td = [0.0, 0.0, 0.0]
    pre_max = 0.0
    stage: list[tuple[int, int, int, bool]] = []  # layered: (request, tokens, prefix, completes)
    stage_g, stage_groups = 0, 1
    groups_used: dict[int, int] = {}
    done = 0
    blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per-iteration records, in order

    def flush() -> None:
        if iter_ms:
            blocks.append((np.array(iter_ms), np.array(iter_dec, dtype=np.int64), np.array(iter_pre, dtype=np.int64)))
            iter_ms.clear()
            iter_dec.clear()
            iter_pre.clear()

    def admit() -> bool:
        nonlocal kv_free, running, done
        while waiting:
            i = waiting[0]
            need = int(plen[i] + olen[i])
            if need > cfg.max_total_tokens:  # never fits
                waiting.popleft()
                rejected[i] = True
                done += 1
                continue
            if running >= max_running or need > kv_free:
                return False
            waiting.popleft()
            kv_free -= need
            running += 1
            prefilling.append([i, 0])
            return True
        return False

    def take(budget: int) -> list[tuple[int, int, int, bool]]:
        """Prompt segments for this forward: the partly prefilled request first, then new ones."""
        segs = []
        while budget > 0:
            if not prefilling and not admit():
                break
            i, d = prefilling[0]
            s = min(budget, int(plen[i]) - d)
            completes = d + s == plen[i]
            segs.append((i, s, d, completes))
            budget -= s
            if completes:
                prefilling.popleft()
            else:
                prefilling[0][1] = d + s
        return segs

    while done < n:
        while ptr < n and arr[ptr] <= t:
            waiting.append(ptr)
            ptr += 1
        if joins:
            for i in joins:
                decode += 1
                sum_ctx += plen[i] + 1
            joins = []
        # ---- what this iteration runs
        if layered:
            if not stage:
                stage = take(schedule.large_chunk)
                if stage:
                    tokens = sum(s for _, s, _, _ in stage)
                    stage_groups = schedule.groups or costs.group_count(tokens, schedule.group_tokens)
                    stage_groups = max(1, min(stage_groups, costs.num_layers))
                    groups_used[stage_groups] = groups_used.get(stage_groups, 0) + 1
                    stage_g = 0
            segs = stage
            groups, group = stage_groups, stage_g
        else:
            segs = take(chunk - decode)
            groups, group = 1, 0
        if not segs and decode == 0:
            if ptr < n:
                t = max(t, arr[ptr])
                continue
            if waiting:  # cannot admit and nothing runs: only rejections remain
                admit()
                continue
            break
        if not segs and finishes[0][0] > it:
            # Decode only, and nothing changes before the next arrival or finish: run those
            # iterations at once (each is a + k x summed context, which grows by `decode` a step).
            step = costs.decode(decode, sum_ctx)
            m = finishes[0][0] - it
            ds = step.ms + costs.k_ms_per_ctx * decode * np.arange(m, dtype=float)
            ends = t + np.cumsum(ds) / 1e3
            cnt = m if ptr >= n else max(1, min(m, int(np.searchsorted(ends, arr[ptr], side="left")) + 1))
            ds = ds[:cnt]
            t = float(ends[cnt - 1])
            flush()
            blocks.append((ds, np.full(cnt, decode, dtype=np.int64), np.zeros(cnt, dtype=np.int64)))
            gpu_busy += cnt * step.gpu_ms + costs.k_ms_per_ctx * decode * cnt * (cnt - 1) / 2
            cpu_busy += cnt * step.cpu_ms
            for k, v in enumerate((step.pcie_bytes, step.hbm_bytes, step.host_bytes)):
                td[k] += cnt * v
            sum_ctx += decode * cnt
            it += cnt
            continue
        ptoks = sum(s for _, s, _, _ in segs)
        step = costs.forward([(s, d) for _, s, d, _ in segs], decode, sum_ctx, groups, group)
        t += step.ms / 1e3
        iter_ms.append(step.ms)
        iter_dec.append(decode)
        iter_pre.append(ptoks)
        gpu_busy += step.gpu_ms
        cpu_busy += step.cpu_ms
        share = ptoks / (ptoks + decode) if ptoks else 0.0
        for k, v in enumerate((step.pcie_bytes, step.hbm_bytes, step.host_bytes)):
            tp[k] += v * share
            td[k] += v * (1.0 - share)
        if ptoks:
            pre_max = max(pre_max, step.ms)
            if step.layerwise_layers:
                for i, s, _, _ in segs:
                    loads[i] += step.layerwise_layers * s / ptoks
        # ---- prompts that finished prefill this iteration
        finished_prefill = []
        if layered:
            stage_g += 1
            if stage_g >= stage_groups:
                finished_prefill = [i for i, _, _, c in stage if c]
                stage = []
        else:
            finished_prefill = [i for i, _, _, c in segs if c]
        for i in finished_prefill:
            first[i] = t
            if olen[i] <= 1:
                finish[i] = t
                kv_free += int(plen[i] + olen[i])
                running -= 1
                done += 1
            else:
                start_it[i] = it + 1
                end_it[i] = it + int(olen[i]) - 1
                heapq.heappush(finishes, (int(end_it[i]), i))
                joins.append(i)
        # ---- decode tokens of this iteration
        sum_ctx += decode
        while finishes and finishes[0][0] == it:
            _, i = heapq.heappop(finishes)
            finish[i] = t
            decode -= 1
            sum_ctx -= plen[i] + olen[i]
            kv_free += int(plen[i] + olen[i])
            running -= 1
            done += 1
        it += 1

    flush()
    ims = np.concatenate([b[0] for b in blocks]) if blocks else np.zeros(0)
    idec = np.concatenate([b[1] for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
    ipre = np.concatenate([b[2] for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
    gaps = np.zeros(n)
    gaps[rejected] = np.nan
    multi = np.nonzero(start_it >= 0)[0]
    if len(multi):
        idx = np.empty(2 * len(multi), dtype=np.int64)
        idx[0::2] = start_it[multi]
        idx[1::2] = end_it[multi] + 1
        padded = np.append(ims, 0.0)
        gaps[multi] = np.maximum.reduceat(padded, idx)[0::2]
    return Trace(arr, plen, olen, first, finish, gaps, rejected, ims, idec, ipre, pre_max,
                 t, gpu_busy, cpu_busy, tuple(tp), tuple(td), loads, groups_used)
