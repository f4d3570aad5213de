"""Simulated traffic: requests (arrival time, prompt tokens, output tokens), drawn from a named
mix at a Poisson rate, or read from a trace file.

Presets (`MIXES`) are log-normal prompt and output lengths, clipped; `mix_statistics` states their
mean, median and p90 from a fixed sample. They follow the two data sets of the Layered Prefill paper
(docs/simulate.md): arXiv summarisation (mean prompt about 9.2K tokens, output about 1/40 of the
prompt) and ShareGPT chat (mean prompt about 2.3K tokens, output about 1/6 of it), each with the
paper's TTFT / TBT limits for Qwen3-30B-A3B.

A trace file is CSV with a header naming `arrival_s`, `prompt_tokens`, `output_tokens` (other
columns ignored), or JSON lines with those keys; arrivals need not be sorted.
"""

from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from kttune.errors import UserError


@dataclass(frozen=True)
class Request:
    rid: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int  # generated tokens, the first one included (>= 1)


@dataclass(frozen=True)
class Mix:
    name: str
    description: str
    prompt_median: float
    prompt_sigma: float  # log-normal sigma of the prompt length
    output_median: float
    output_sigma: float
    prompt_min: int = 16
    prompt_max: int = 32768
    output_min: int = 1
    output_max: int = 4096
    ttft_slo_s: float = 10.0
    tbt_slo_ms: float = 125.0

    def sample(self, rng: random.Random) -> tuple[int, int]:
        p = int(round(self.prompt_median * math.exp(self.prompt_sigma * rng.gauss(0.0, 1.0))))
        o = int(round(self.output_median * math.exp(self.output_sigma * rng.gauss(0.0, 1.0))))
        return min(self.prompt_max, max(self.prompt_min, p)), min(self.output_max, max(self.output_min, o))

    def to_dict(self) -> dict:
        return asdict(self)


MIXES: dict[str, Mix] = {
    "summarize": Mix(
        "summarize",
        "long-document summarisation like the paper's arXiv set: prompts log-normal (median 8.4K, sigma 0.45, "
        "mean about 9.2K), outputs about 1/40 of that (median 200, sigma 0.5); SLO 10 s TTFT / 125 ms TBT",
        prompt_median=8400, prompt_sigma=0.45, output_median=200, output_sigma=0.5, prompt_min=512, prompt_max=30000,
        ttft_slo_s=10.0, tbt_slo_ms=125.0),
    "chat": Mix(
        "chat",
        "chat like the paper's ShareGPT set: prompts log-normal (median 1.5K, sigma 0.9, mean about 2.3K), "
        "outputs about 1/6 of that (median 300, sigma 0.8); SLO 5 s TTFT / 125 ms TBT",
        prompt_median=1550, prompt_sigma=0.9, output_median=300, output_sigma=0.8, prompt_min=16, prompt_max=30000,
        ttft_slo_s=5.0, tbt_slo_ms=125.0),
}


def get_mix(name: str) -> Mix:
    if name not in MIXES:
        raise UserError(f"unknown simulation workload {name!r}", f"use one of {', '.join(MIXES)} or a trace file (.csv/.jsonl)")
    return MIXES[name]


def poisson_requests(mix: Mix, rate_per_s: float, count: int, seed: int = 0) -> list[Request]:
    """`count` requests of `mix` arriving as a Poisson process of `rate_per_s`."""
    if rate_per_s <= 0:
        raise UserError(f"arrival rate {rate_per_s} must be positive", "pass e.g. --rate 0.5 (requests per second)")
    if count < 1:
        raise UserError(f"request count {count} must be at least 1", "pass e.g. --requests 500")
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(count):
        t += rng.expovariate(rate_per_s)
        p, o = mix.sample(rng)
        out.append(Request(i, t, p, o))
    return out


def rescale_arrivals(requests: list[Request], rate_per_s: float) -> list[Request]:
    """The same requests with arrival times scaled so that their mean rate is `rate_per_s`."""
    if len(requests) < 2:
        return list(requests)
    span = requests[-1].arrival_s - requests[0].arrival_s
    if span <= 0:
        return list(requests)
    f = (len(requests) - 1) / rate_per_s / span
    t0 = requests[0].arrival_s
    return [Request(r.rid, (r.arrival_s - t0) * f, r.prompt_tokens, r.output_tokens) for r in requests]


def mix_statistics(mix: Mix, n: int = 20000, seed: int = 1) -> dict:
    """Mean, median and p90 of prompt and output tokens over a fixed sample of the mix."""
    rng = random.Random(seed)
    ps, os_ = zip(*(mix.sample(rng) for _ in range(n)))
    return {"prompt_tokens": _stats(ps), "output_tokens": _stats(os_)}


def trace_statistics(requests: list[Request]) -> dict:
    span = requests[-1].arrival_s - requests[0].arrival_s if len(requests) > 1 else 0.0
    return {"prompt_tokens": _stats([r.prompt_tokens for r in requests]),
            "output_tokens": _stats([r.output_tokens for r in requests]),
            "requests": len(requests), "mean_rate_per_s": (len(requests) - 1) / span if span > 0 else None}


def _stats(xs) -> dict:
    s = sorted(xs)
    n = len(s)
    return {"mean": sum(s) / n, "p50": s[n // 2], "p90": s[min(n - 1, int(0.9 * n))], "max": s[-1]}


TRACE_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")


def load_trace(path: str) -> list[Request]:
    """Requests from a trace file (module docstring), sorted by arrival."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"trace file {path!r} does not exist", "pass a CSV or JSON-lines file of arrival_s, prompt_tokens, output_tokens")
    rows: list[dict] = []
    try:
        text = p.read_text()
        if p.suffix in (".jsonl", ".json"):
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            rows = list(csv.DictReader(text.splitlines()))
        reqs = []
        for i, r in enumerate(rows):
            a, pt, ot = float(r["arrival_s"]), int(float(r["prompt_tokens"])), int(float(r["output_tokens"]))
            if a < 0 or pt < 1 or ot < 1:
                raise ValueError(f"row {i + 1}: arrival must be >= 0 and lengths >= 1")
            reqs.append((a, pt, ot))
    except (KeyError, ValueError, TypeError, json.JSONDecodeError) as e:
        raise UserError(f"trace file {path!r} is not valid ({type(e).__name__}: {e})",
                        "write a header row arrival_s,prompt_tokens,output_tokens (CSV) or one JSON object per line with those keys") from None
    if not reqs:
        raise UserError(f"trace file {path!r} holds no requests", "add rows of arrival_s, prompt_tokens, output_tokens")
    reqs.sort()
    return [Request(i, a, pt, ot) for i, (a, pt, ot) in enumerate(reqs)]


def requests_from_workload(prompt_tokens: tuple[int, ...], weights: tuple[float, ...], output_tokens: int, rate_per_s: float,
                           count: int, seed: int = 0) -> list[Request]:
    """Poisson arrivals whose prompts are drawn from a search workload's weighted representative
    lengths (kttune.search.workload.Workload) and whose outputs are its mean output length."""
    if rate_per_s <= 0:
        raise UserError(f"arrival rate {rate_per_s} must be positive", "pass e.g. --rate 1.5 (requests per second)")
    rng = random.Random(seed)
    t, out = 0.0, []
    prompts = rng.choices(prompt_tokens, weights=weights, k=count)
    for i, p in enumerate(prompts):
        t += rng.expovariate(rate_per_s)
        out.append(Request(i, t, int(p), max(1, int(output_tokens))))
    return out
