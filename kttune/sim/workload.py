"""Simulated traffic: requests (arrival time, prompt tokens, output tokens) as a stream of numpy
chunks, so a run of millions of requests holds a few chunks at a time.

Streams (each re-iterable: every schedule replays the same requests):
- `MixStream`: Poisson arrivals with prompt and output lengths drawn from a clipped log-normal `Mix`
  (the Layered Prefill paper's arXiv and ShareGPT sets ship as the presets `arxiv-summarize` and
  `sharegpt-chat`, profiles/workloads/);
- `LengthsStream`: Poisson arrivals with prompts drawn from weighted representative lengths and a
  fixed output length (a search workload; the same requests the SLO-aware search simulates);
- `TraceStream`: a trace file, CSV with a header naming `arrival_s`, `prompt_tokens`,
  `output_tokens` (other columns ignored) or JSON lines with those keys. `scan_trace` reads it once,
  checks every row (its line named on error) and counts its lengths; a trace of up to
  IN_MEMORY_ROWS rows is then held as arrays (and sorted by arrival if it is not), a longer one must
  be sorted by arrival and is read again, a chunk at a time, by every run;
- `RequestList`: requests given as a list (tests, capacity bisection).
Every chunk is checked by `check_chunk` (the engine calls it too) so no stream can hand the
simulator a NaN or infinite arrival, an unsorted one, or a length out of range.
"""

from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Iterator

import numpy as np

from kttune.errors import UserError
from kttune.sim.quantiles import LengthCounts

MAX_PROMPT_TOKENS = 1 << 24  # 16M tokens: above any served context (1M today)
MAX_ARRIVAL_S = 1e12  # about 31,700 years: arrival times are seconds (a Unix time in seconds fits)
CHUNK = 1 << 14  # requests per chunk
IN_MEMORY_ROWS = 1 << 22  # a trace up to this many rows is held as arrays (24 bytes a row)
TRACE_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")

Chunk = tuple[np.ndarray, np.ndarray, np.ndarray]  # arrival_s (float), prompt_tokens, output_tokens (int64)


@dataclass(frozen=True)
class Request:
    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int  # generated tokens, the first one included (>= 1)


def check_chunk(arr: np.ndarray, plen: np.ndarray, olen: np.ndarray, after_s: float, where: str) -> None:
    """Arrivals finite, in 0..MAX_ARRIVAL_S, not before `after_s` nor each other; lengths whole
    numbers 1..MAX_PROMPT_TOKENS. UserError naming `where` otherwise."""
    if not (arr.shape == plen.shape == olen.shape):
        raise ValueError("chunk arrays differ in length")
    if arr.size == 0:
        return
    ok_arr = np.isfinite(arr) & (arr >= 0) & (arr <= MAX_ARRIVAL_S)
    if not ok_arr.all():
        i = int(np.argmin(ok_arr))
        raise UserError(
            f"{where}: request {i + 1} of a chunk arrives at {arr[i]} s",
            f"arrival times must be finite seconds in 0..{MAX_ARRIVAL_S:.0e}",
        )
    if arr[0] < after_s or (arr.size > 1 and not (np.diff(arr) >= 0).all()):
        raise UserError(f"{where}: arrival times are not in order", "sort the requests by arrival_s")
    for name, v in (("prompt_tokens", plen), ("output_tokens", olen)):
        ok = (v >= 1) & (v <= MAX_PROMPT_TOKENS)
        if not ok.all():
            i = int(np.argmin(ok))
            raise UserError(
                f"{where}: a request with {name} {v[i]}", f"lengths must be 1..{MAX_PROMPT_TOKENS:,} tokens"
            )


def _check_rate(rate_per_s: float) -> None:
    if not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s) and rate_per_s > 0):
        raise UserError(
            f"arrival rate {rate_per_s} must be a positive number of requests per second",
            "pass e.g. {rate_per_s} 0.5",
            params=("rate_per_s",),
        )


def _check_count(count: int) -> None:
    if not isinstance(count, int) or count < 1:
        raise UserError(f"request count {count} must be at least 1", "pass e.g. {requests} 500", params=("requests",))


# ---- log-normal mixes ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mix:
    """Clipped log-normal prompt and output lengths (tokens)."""

    prompt_median: float
    prompt_sigma: float  # log-normal sigma of the prompt length
    output_median: float
    output_sigma: float
    prompt_min: int = 16
    prompt_max: int = 32768
    output_min: int = 1
    output_max: int = 4096

    def sample(self, rng: random.Random) -> tuple[int, int]:
        p = int(round(self.prompt_median * math.exp(self.prompt_sigma * rng.gauss(0.0, 1.0))))
        o = int(round(self.output_median * math.exp(self.output_sigma * rng.gauss(0.0, 1.0))))
        return min(self.prompt_max, max(self.prompt_min, p)), min(self.output_max, max(self.output_min, o))

    def to_dict(self) -> dict:
        return asdict(self)


def mix_statistics(mix: Mix, n: int = 20000, seed: int = 1) -> dict:
    """Mean, median and p90 of prompt and output tokens over a fixed sample of the mix."""
    rng = random.Random(seed)
    ps, os_ = zip(*(mix.sample(rng) for _ in range(n)))
    return {"prompt_tokens": _stats(ps), "output_tokens": _stats(os_)}


def _stats(xs) -> dict:
    c = LengthCounts()
    c.add(np.asarray(xs, dtype=np.int64))
    return c.statistics()


# ---- streams ---------------------------------------------------------------------------------------
class _Stream:
    count: int

    def chunks(self) -> Iterator[Chunk]:
        raise NotImplementedError

    def head(self, k: int) -> list[Request]:
        """The first k requests (by arrival) as a list."""
        out: list[Request] = []
        for arr, plen, olen in self.chunks():
            for a, p, o in zip(arr.tolist(), plen.tolist(), olen.tolist()):
                if len(out) >= k:
                    return out
                out.append(Request(len(out), a, p, o))
        return out


@dataclass(frozen=True)
class RequestList(_Stream):
    """Requests given as a list, replayed in order of arrival (ties in the order given)."""

    requests: tuple[Request, ...]

    @property
    def count(self) -> int:
        return len(self.requests)

    def chunks(self) -> Iterator[Chunk]:
        reqs = sorted(self.requests, key=lambda r: r.arrival_s)
        for s in range(0, len(reqs), CHUNK):
            part = reqs[s : s + CHUNK]
            yield (
                np.array([r.arrival_s for r in part], dtype=float),
                np.array([r.prompt_tokens for r in part], dtype=np.int64),
                np.array([r.output_tokens for r in part], dtype=np.int64),
            )


class _Poisson(_Stream):
    """A stream of `count` Poisson arrivals at `rate_per_s` (the subclass holds the fields)."""

    rate_per_s: float
    count: int

    def __post_init__(self) -> None:
        _check_rate(self.rate_per_s)
        _check_count(self.count)


@dataclass(frozen=True)
class MixStream(_Poisson):
    """`count` requests of `mix` arriving as a Poisson process of `rate_per_s` (one Random(seed)
    draws each request's gap, then its prompt and output)."""

    mix: Mix
    rate_per_s: float
    count: int
    seed: int = 0
    chunk: int = CHUNK

    def chunks(self) -> Iterator[Chunk]:
        rng, t = random.Random(self.seed), 0.0
        expo, sample, rate = rng.expovariate, self.mix.sample, self.rate_per_s
        for s in range(0, self.count, self.chunk):
            arr, ps, os_ = [], [], []
            for _ in range(min(self.chunk, self.count - s)):
                t += expo(rate)
                p, o = sample(rng)
                arr.append(t)
                ps.append(p)
                os_.append(o)
            yield np.array(arr), np.array(ps, dtype=np.int64), np.array(os_, dtype=np.int64)


@dataclass(frozen=True)
class LengthsStream(_Poisson):
    """Poisson arrivals whose prompts are drawn from weighted representative lengths and whose
    outputs are `output_tokens`: Random(seed) draws all `count` prompts first, then the gaps (two
    generators on the same seed, the second skipped past the prompts' draws, give that order a
    chunk at a time)."""

    prompt_tokens: tuple[int, ...]
    weights: tuple[float, ...]
    output_tokens: int
    rate_per_s: float
    count: int
    seed: int = 0
    chunk: int = CHUNK

    def chunks(self) -> Iterator[Chunk]:
        pick, gaps = random.Random(self.seed), random.Random(self.seed)
        skip = gaps.random
        for _ in range(self.count):
            skip()
        cum = list(accumulate(self.weights))
        out = max(1, int(self.output_tokens))
        t = 0.0
        for s in range(0, self.count, self.chunk):
            m = min(self.chunk, self.count - s)
            prompts = pick.choices(self.prompt_tokens, cum_weights=cum, k=m)
            arr = []
            for _ in range(m):
                t += gaps.expovariate(self.rate_per_s)
                arr.append(t)
            yield np.array(arr), np.array(prompts, dtype=np.int64), np.full(m, out, dtype=np.int64)


def poisson_requests(mix: Mix, rate_per_s: float, count: int, seed: int = 0) -> list[Request]:
    """The requests of `MixStream` as a list."""
    return MixStream(mix, rate_per_s, count, seed).head(count)


def requests_from_workload(
    prompt_tokens: tuple[int, ...],
    weights: tuple[float, ...],
    output_tokens: int,
    rate_per_s: float,
    count: int,
    seed: int = 0,
) -> list[Request]:
    """The requests of `LengthsStream` as a list."""
    return LengthsStream(tuple(prompt_tokens), tuple(weights), output_tokens, rate_per_s, count, seed).head(count)


def rescale_arrivals(requests: list[Request], rate_per_s: float) -> list[Request]:
    """The same requests with arrival times scaled so that their mean rate is `rate_per_s`."""
    _check_rate(rate_per_s)
    if len(requests) < 2:
        return list(requests)
    span = requests[-1].arrival_s - requests[0].arrival_s
    if span <= 0:
        return list(requests)
    f = (len(requests) - 1) / rate_per_s / span
    t0 = requests[0].arrival_s
    return [Request(r.rid, (r.arrival_s - t0) * f, r.prompt_tokens, r.output_tokens) for r in requests]


# ---- trace files -----------------------------------------------------------------------------------
TRACE_FIX = (
    f"write a header row arrival_s,prompt_tokens,output_tokens (CSV) or one JSON object per line with those keys "
    f"(.jsonl): arrival_s in seconds (finite, >= 0), lengths whole numbers 1..{MAX_PROMPT_TOKENS:,}"
)


def _trace_error(path: str, problem: str) -> UserError:
    return UserError(f"trace file {path!r} {problem}", TRACE_FIX)


def _csv_rows(path: str, f) -> Iterator[tuple[int, object, object, object]]:
    reader = csv.reader(f)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as e:
        raise _trace_error(path, f"line 1 is not CSV ({e})") from None
    cols = [h.strip() for h in header]
    missing = [k for k in TRACE_FIELDS if k not in cols]
    if missing:
        raise _trace_error(path, f"has no column {', '.join(missing)} in its header (line 1: {','.join(cols)[:80]})")
    ia, ip, io = (cols.index(k) for k in TRACE_FIELDS)
    width = max(ia, ip, io)
    try:
        for row in reader:
            if not row or len(row) == 1 and not row[0].strip():
                continue
            if len(row) <= width:
                raise _trace_error(path, f"line {reader.line_num}: {len(row)} columns, the header names {len(cols)}")
            yield reader.line_num, row[ia], row[ip], row[io]
    except csv.Error as e:
        raise _trace_error(path, f"line {reader.line_num} is not CSV ({e})") from None


def _jsonl_rows(path: str, f) -> Iterator[tuple[int, object, object, object]]:
    for ln, line in enumerate(f, start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise _trace_error(path, f"line {ln}, column {e.colno}: not JSON ({e.msg})") from None
        if not isinstance(d, dict):
            raise _trace_error(path, f"line {ln}: a JSON {type(d).__name__}, not an object")
        missing = [k for k in TRACE_FIELDS if k not in d]
        if missing:
            raise _trace_error(path, f"line {ln}: no {', '.join(missing)}")
        for k in TRACE_FIELDS:
            v = d[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _trace_error(path, f"line {ln}: {k} is {json.dumps(v)[:40]}, not a number")
        yield ln, d["arrival_s"], d["prompt_tokens"], d["output_tokens"]


def _number(path: str, ln: int, name: str, v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        raise _trace_error(path, f"line {ln}: {name} {str(v)[:40]!r} is not a number") from None


def _row_problem(a: float, p: float, o: float) -> str | None:
    if not (math.isfinite(a) and 0 <= a <= MAX_ARRIVAL_S):
        return f"arrival_s {a} is not a time in 0..{MAX_ARRIVAL_S:.0e} s"
    for name, v in (("prompt_tokens", p), ("output_tokens", o)):
        if not (math.isfinite(v) and v == int(v)):
            return f"{name} {v} is not a whole number of tokens"
        if not 1 <= v <= MAX_PROMPT_TOKENS:
            return f"{name} {int(v):,} is outside 1..{MAX_PROMPT_TOKENS:,} (no model serves a longer context)"
    return None


def read_trace(path: str) -> Iterator[Chunk]:
    """The rows of a trace file as checked chunks, in file order."""
    p = Path(path)
    if not p.is_file():
        raise UserError(
            f"trace file {path!r} does not exist",
            "pass a CSV or JSON-lines file of arrival_s, prompt_tokens, output_tokens",
        )
    rows = _jsonl_rows if p.suffix == ".jsonl" else _csv_rows
    try:
        with p.open(encoding="utf-8", newline="") as f:
            arr: list[float] = []
            ps: list[float] = []
            os_: list[float] = []
            for ln, a, pt, ot in rows(path, f):
                a, pt, ot = (
                    _number(path, ln, "arrival_s", a),
                    _number(path, ln, "prompt_tokens", pt),
                    _number(path, ln, "output_tokens", ot),
                )
                if not (
                    0 <= a <= MAX_ARRIVAL_S
                    and 1 <= pt <= MAX_PROMPT_TOKENS
                    and 1 <= ot <= MAX_PROMPT_TOKENS
                    and pt == int(pt)
                    and ot == int(ot)
                ):
                    raise _trace_error(path, f"line {ln}: {_row_problem(a, pt, ot)}")
                arr.append(a)
                ps.append(pt)
                os_.append(ot)
                if len(arr) >= CHUNK:
                    yield np.array(arr), np.array(ps, dtype=np.int64), np.array(os_, dtype=np.int64)
                    arr, ps, os_ = [], [], []
            if arr:
                yield np.array(arr), np.array(ps, dtype=np.int64), np.array(os_, dtype=np.int64)
    except UnicodeDecodeError as e:
        raise _trace_error(path, f"is not UTF-8 text ({e.reason} at byte {e.start})") from None


@dataclass(frozen=True, eq=False)
class TraceInfo:
    """What one pass over a trace file found: its size, arrivals and length counts, and its rows
    when it is short enough to hold (sorted by arrival)."""

    path: str
    rows: int
    first_arrival_s: float
    last_arrival_s: float
    in_order: bool  # the file's arrivals never decrease
    prompt_tokens: LengthCounts = field(repr=False)
    output_tokens: LengthCounts = field(repr=False)
    arrays: Chunk | None = field(default=None, repr=False)

    @property
    def mean_rate_per_s(self) -> float | None:
        span = self.last_arrival_s - self.first_arrival_s
        return (self.rows - 1) / span if self.rows > 1 and span > 0 else None

    def statistics(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens.statistics(),
            "output_tokens": self.output_tokens.statistics(),
            "requests": self.rows,
            "mean_rate_per_s": self.mean_rate_per_s,
        }


def scan_trace(path: str) -> TraceInfo:
    """Read and check a trace file once (module docstring)."""
    rows, first, last, in_order, prev = 0, math.inf, -math.inf, True, -math.inf
    pc, oc = LengthCounts(), LengthCounts()
    held: list[Chunk] | None = []
    for arr, plen, olen in read_trace(path):
        rows += arr.size
        first, last = min(first, float(arr.min())), max(last, float(arr.max()))
        if in_order and (arr[0] < prev or (arr.size > 1 and not (np.diff(arr) >= 0).all())):
            in_order = False
        prev = float(arr[-1])
        pc.add(plen)
        oc.add(olen)
        if held is not None:
            held.append((arr, plen, olen))
            if rows > IN_MEMORY_ROWS:
                held = None
    if rows == 0:
        raise UserError(f"trace file {path!r} holds no requests", "add rows of arrival_s, prompt_tokens, output_tokens")
    if held is None and not in_order:
        raise UserError(
            f"trace file {path!r} has more than {IN_MEMORY_ROWS:,} rows and its arrivals are not in order",
            "sort it by arrival_s (e.g. `sort -t, -k1,1g` below its header) so kttune can stream it",
        )
    arrays = None
    if held is not None:
        a, p, o = (np.concatenate([h[i] for h in held]) for i in range(3))
        if not in_order:
            order = np.lexsort((o, p, a))
            a, p, o = a[order], p[order], o[order]
        arrays = (a, p, o)
    return TraceInfo(path, rows, first, last, in_order, pc, oc, arrays)


@dataclass(frozen=True)
class TraceStream(_Stream):
    """The requests of a scanned trace, by arrival; with `rate_per_s` its arrivals are rescaled to
    that mean rate (first arrival at 0)."""

    info: TraceInfo
    rate_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.rate_per_s is not None:
            _check_rate(self.rate_per_s)

    @property
    def count(self) -> int:
        return self.info.rows

    def chunks(self) -> Iterator[Chunk]:
        info = self.info
        span = info.last_arrival_s - info.first_arrival_s
        scale = None
        if self.rate_per_s is not None and info.rows > 1 and span > 0:
            scale = (info.rows - 1) / self.rate_per_s / span
        if info.arrays is not None:
            arr, plen, olen = info.arrays
            parts = ((arr[s : s + CHUNK], plen[s : s + CHUNK], olen[s : s + CHUNK]) for s in range(0, arr.size, CHUNK))
        else:
            parts = read_trace(info.path)
        for a, p, o in parts:
            yield ((a - info.first_arrival_s) * scale if scale is not None else a), p, o


def load_trace(path: str) -> list[Request]:
    """A trace file's requests as a list, by arrival."""
    info = scan_trace(path)
    return TraceStream(info).head(info.rows)
