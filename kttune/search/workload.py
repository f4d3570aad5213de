"""Workloads: what the server will be asked to do, one namespace for `search`, `explain` and
`simulate`. Presets ship in profiles/workloads/ (`kttune workloads` lists them); users pass a JSON
file or a trace. One loader, `load_workload`, reads every form:

- lengths: `{"prompt_tokens": [lengths], "weights": [shares], "output_tokens": N, ...}`. Without
  weights the list is a sample of prompt lengths, exactly like `{"samples": [lengths]}` or a bare
  JSON list. More than BINS distinct lengths, weighted or not, are reduced to BINS quantile bins
  (kttune.sim.quantiles.quantile_bins), so a list of ten million lengths is as quick as twelve.
- log-normal: `{"prompt_tokens": {"median": M, "sigma": S, "min": A, "max": B}, "output_tokens":
  {...}}`: clipped log-normal lengths (the Layered Prefill paper's arXiv and ShareGPT sets ship this
  way, as `arxiv-summarize` and `sharegpt-chat`).
- trace: a CSV or JSON-lines file of `arrival_s, prompt_tokens, output_tokens`
  (kttune.sim.workload.scan_trace), read once and counted exactly.
Every form also takes `output_tokens`, `concurrency`, `decode_weight`, `ttft_slo_ms`,
`tbt_slo_ms`, `name`, `description` (keys starting with `_` are comments).

What each command uses: search and explain score the weighted representative lengths (a log-normal
form: its BINS quantile bins; a trace: its prompts' bins) at the mean output length; simulate draws
requests from the same lengths with that output length (`lengths`), from both distributions
(`log-normal`), or replays the trace with its own arrivals (`trace`).

Bad input is one line (UserError) naming the file, the field and, in JSON, the line and column.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from statistics import NormalDist

import numpy as np

from kttune.errors import UserError
from kttune.sim.quantiles import LengthCounts, quantile_bins
from kttune.sim.workload import MAX_PROMPT_TOKENS, Mix, TraceInfo, mix_statistics, scan_trace

MAX_CONCURRENCY = 1 << 16
BINS = 12  # representative prompt lengths the search scores
MAX_JSON_BYTES = 512 << 20  # a workload JSON is parsed whole
FORMS = ("lengths", "log-normal", "trace")
TRACE_SUFFIXES = (".csv", ".jsonl")
KEYS = (
    "name",
    "description",
    "prompt_tokens",
    "weights",
    "samples",
    "output_tokens",
    "concurrency",
    "decode_weight",
    "ttft_slo_ms",
    "tbt_slo_ms",
)
FIX = (
    'write {"prompt_tokens": [lengths], "weights": [shares], "output_tokens": N, "concurrency": N, "decode_weight": 0..1}, '
    '{"samples": [lengths]}, or {"prompt_tokens": {"median": M, "sigma": S}, "output_tokens": {"median": M, "sigma": S}} '
    "(README: workloads)"
)


@dataclass(frozen=True)
class Workload:
    name: str
    prompt_tokens: tuple[int, ...]  # representative prompt lengths
    weights: tuple[float, ...]  # their shares of requests (sum to 1)
    output_tokens: int = 512  # mean generated tokens per request
    concurrency: int = 8  # decode batch to serve at once
    decode_weight: float = 0.3  # 0 = only prefill matters, 1 = only decode
    ttft_slo_ms: float | None = None
    tbt_slo_ms: float | None = None
    description: str = ""
    form: str = "lengths"  # lengths | log-normal | trace (what simulate draws from: module docstring)
    mix: Mix | None = None  # log-normal: the distributions
    trace: TraceInfo | None = None  # trace: the scanned file
    source: str = "file"  # preset | file

    @property
    def mean_prompt_tokens(self) -> float:
        return sum(p * w for p, w in zip(self.prompt_tokens, self.weights))

    @property
    def max_prompt_tokens(self) -> int:
        return max(self.prompt_tokens)

    def reduced(self, k: int) -> "Workload":
        """At most `k` representative lengths for measuring (each measured length costs a run): the
        lengths, in order, split into k groups of about equal request share; each group is its
        weighted mean length carrying the group's share, so the workload's tokens (the objective's
        numerator, sum w L) are kept. The same workload when it has k or fewer lengths."""
        if k < 1:
            raise ValueError("k must be at least 1")
        pairs = sorted(zip(self.prompt_tokens, self.weights))
        if len(pairs) <= k:
            return self
        total = sum(w for _, w in pairs)
        groups: list[list[tuple[int, float]]] = [[] for _ in range(k)]
        acc = 0.0
        for p, w in pairs:
            g = min(k - 1, int(k * (acc + w / 2) / total))  # the group holding this length's midpoint share
            groups[g].append((p, w))
            acc += w
        reps, ws = [], []
        for grp in groups:
            gw = sum(w for _, w in grp)
            if not grp or gw <= 0:
                continue
            reps.append(max(1, round(sum(p * w for p, w in grp) / gw)))
            ws.append(gw / total)
        return replace(
            self,
            prompt_tokens=tuple(reps),
            weights=tuple(ws),
            description=(self.description + f" (reduced to {len(reps)} measured lengths)").strip(),
        )

    def clipped(self, context_len: int) -> "Workload":
        """Prompts longer than the model's context (minus the output) are clipped to fit
        (`clip_note` says so)."""
        cap = max(1, context_len - self.output_tokens)
        if not context_len or self.max_prompt_tokens <= cap:
            return self
        return replace(self, prompt_tokens=tuple(min(p, cap) for p in self.prompt_tokens))

    def clip_note(self, context_len: int) -> str | None:
        """What `clipped(context_len)` changes, in words; None when nothing is clipped."""
        cap = max(1, context_len - self.output_tokens)
        if not context_len or self.max_prompt_tokens <= cap:
            return None
        share = sum(w for p, w in zip(self.prompt_tokens, self.weights) if p > cap)
        return (
            f"workload {self.name}: prompts longer than the model's {context_len:,}-token context minus "
            f"{self.output_tokens} output tokens ({share:.0%} of requests, up to {self.max_prompt_tokens:,} "
            f"tokens) are modelled clipped to {cap:,} tokens"
        )

    def search_fields(self) -> dict:
        """The fields search and explain read (what a study's key depends on): not the form, the
        distributions or the trace simulate draws from."""
        return {k: v for k, v in self.__dict__.items() if k not in ("form", "mix", "trace", "source")}

    def uses(self) -> dict[str, str]:
        """What search and simulate take from this workload, in words."""
        n = len(self.prompt_tokens)
        lengths = f"{n} prompt length{'s' if n > 1 else ''}"
        search = {
            "lengths": lengths,
            "log-normal": f"{lengths} (quantile bins)",
            "trace": f"{lengths} (the trace's bins)",
        }[self.form]
        simulate = {
            "lengths": f"Poisson draws of the {lengths}",
            "log-normal": "Poisson draws of the log-normals",
            "trace": f"the trace's {self.trace.rows:,} requests" if self.trace else "the trace",
        }[self.form]
        return {"search": f"{search}, output {self.output_tokens}", "simulate": simulate}

    def to_dict(self) -> dict:
        """`kttune workloads --json` and the search result's context."""
        return {
            "name": self.name,
            "description": self.description,
            "form": self.form,
            "source": self.source,
            "prompt_tokens": list(self.prompt_tokens),
            "weights": list(self.weights),
            "output_tokens": self.output_tokens,
            "concurrency": self.concurrency,
            "decode_weight": self.decode_weight,
            "ttft_slo_ms": self.ttft_slo_ms,
            "tbt_slo_ms": self.tbt_slo_ms,
            "log_normal": self.mix.to_dict() if self.mix else None,
            "trace": {"path": self.trace.path, "requests": self.trace.rows} if self.trace else None,
            "uses": self.uses(),
        }


# ---- checks of JSON values ---------------------------------------------------------------------------
class _Bad(Exception):
    """A field's problem, turned into a UserError naming the file."""


def _show(v) -> str:
    if isinstance(v, float):
        return str(v) if not math.isfinite(v) else f"{v:.0f}" if v.is_integer() else repr(v)
    return json.dumps(v)[:40]


def _number(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Bad(f"{what} is {_show(v)}, not a number")
    if not math.isfinite(v):
        raise _Bad(f"{what} is {v}, not a finite number")
    return float(v)


def _whole(v, what: str, lo: int, hi: int) -> int:
    x = _number(v, what)
    if x != int(x):
        raise _Bad(f"{what} {x:g} is not a whole number")
    if not lo <= x <= hi:
        raise _Bad(f"{what} {int(x):,} is outside {lo:,}..{hi:,}")
    return int(x)


def _real(v, what: str, lo: float, hi: float) -> float:
    x = _number(v, what)
    if not lo <= x <= hi:
        raise _Bad(f"{what} {x:g} is outside {lo:g}..{hi:g}")
    return x


def _list(v, what: str) -> list:
    if not isinstance(v, list):
        raise _Bad(f"{what} is {_show(v)}, not a list")
    if not v:
        raise _Bad(f"{what} is empty")
    return v


def _lengths(v, what: str) -> np.ndarray:
    """A JSON list of whole token counts 1..MAX_PROMPT_TOKENS, as int64 (checked at numpy speed)."""
    v = _list(v, what)
    if not set(map(type, v)) <= {int, float}:  # (bool is not a number here)
        bad = next(i for i, x in enumerate(v) if type(x) not in (int, float))
        raise _Bad(f"{what}[{bad}] is {_show(v[bad])}, not a number")
    try:
        a = np.asarray(v, dtype=float)
    except OverflowError:
        raise _Bad(f"{what} holds a number too large") from None
    ok = np.isfinite(a) & (a == np.round(a)) & (a >= 1) & (a <= MAX_PROMPT_TOKENS)
    if not ok.all():
        i = int(np.argmin(ok))
        raise _Bad(
            f"{what}[{i}] is {_show(v[i])}: lengths are whole numbers of tokens 1..{MAX_PROMPT_TOKENS:,} "
            "(no model serves a longer context)"
        )
    return a.astype(np.int64)


def _weights(v, n: int) -> np.ndarray:
    v = _list(v, "weights")
    if len(v) != n:
        raise _Bad(f"weights has {len(v)} entries, prompt_tokens {n}: one weight per length")
    w = np.array([_number(x, f"weights[{i}]") for i, x in enumerate(v)])
    if (w < 0).any():
        i = int(np.argmax(w < 0))
        raise _Bad(f"weights[{i}] is {w[i]:g}: weights are shares, not negative")
    if not w.sum() > 0:
        raise _Bad("weights sum to 0: give at least one length a positive share")
    return w


def _log_normal(v, what: str, lo: int, hi: int) -> tuple[float, float, int, int]:
    extra = sorted(set(v) - {"median", "sigma", "min", "max"})
    if extra:
        raise _Bad(f"{what} has unknown key {extra[0]!r} (a log-normal takes median, sigma, min, max)")
    if "median" not in v or "sigma" not in v:
        raise _Bad(f"{what} needs median and sigma (tokens, and the log-normal's sigma)")
    median = _real(v["median"], f"{what}.median", 1.0, MAX_PROMPT_TOKENS)
    sigma = _real(v["sigma"], f"{what}.sigma", 0.0, 5.0)
    a = _whole(v.get("min", lo), f"{what}.min", 1, MAX_PROMPT_TOKENS)
    b = _whole(v.get("max", hi), f"{what}.max", 1, MAX_PROMPT_TOKENS)
    if a > b:
        raise _Bad(f"{what}.min {a:,} is above its max {b:,}")
    return median, sigma, a, b


def log_normal_bins(
    median: float, sigma: float, lo: int, hi: int, bins: int = BINS
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The quantile-bin rule (kttune.sim.quantiles.quantile_bins) on a clipped log-normal: its
    quantiles at (b + 1/2) / bins, rounded and clipped, each with share 1 / bins (equal ones merged)."""
    out: dict[int, float] = {}
    for b in range(bins):
        x = median * math.exp(sigma * NormalDist().inv_cdf((b + 0.5) / bins))
        v = min(hi, max(lo, int(round(x))))
        out[v] = out.get(v, 0.0) + 1.0 / bins
    return tuple(out), tuple(out.values())


def clipped_log_normal_mean(median: float, sigma: float, lo: int, hi: int) -> float:
    """E[min(hi, max(lo, X))] for X log-normal (median, sigma): the lengths' mean without the
    rounding (under half a token)."""
    if sigma == 0:
        return min(hi, max(lo, median))
    mu, nd = math.log(median), NormalDist()
    za, zb = (math.log(lo) - mu) / sigma, (math.log(hi) - mu) / sigma
    inner = math.exp(mu + sigma * sigma / 2) * (nd.cdf(zb - sigma) - nd.cdf(za - sigma))
    return lo * nd.cdf(za) + inner + hi * (1 - nd.cdf(zb))


def _prompts(d: dict) -> tuple[tuple[int, ...], tuple[float, ...], tuple | None]:
    """(representatives, weights, log-normal prompt parameters or None) of a workload document."""
    if "samples" in d and "prompt_tokens" in d:
        raise _Bad("both samples and prompt_tokens: keep one")
    if "samples" not in d and "prompt_tokens" not in d:
        raise _Bad("no prompt lengths: add prompt_tokens (or samples)")
    if "weights" in d and not isinstance(d.get("prompt_tokens"), list):
        raise _Bad("weights without a list of prompt_tokens to weigh")
    p = d.get("prompt_tokens")
    if isinstance(p, dict):
        ln = _log_normal(p, "prompt_tokens", Mix.prompt_min, Mix.prompt_max)
        reps, ws = log_normal_bins(*ln)
        return reps, ws, ln
    key = "samples" if "samples" in d else "prompt_tokens"
    lengths = _lengths(d[key], key)
    c = LengthCounts()
    if "weights" not in d:  # a sample of prompt lengths
        c.add(lengths)
        return (*quantile_bins(c, BINS), None)
    raw = _weights(d["weights"], len(lengths))
    if len(lengths) <= BINS:  # representatives as given
        total = sum(raw.tolist())
        return tuple(lengths.tolist()), tuple(w / total for w in raw.tolist()), None
    keep = raw > 0
    c.add(lengths[keep], raw[keep])
    return (*quantile_bins(c, BINS), None)


def workload_from_dict(d, name: str, origin: str, source: str = "file") -> Workload:
    """A workload document (the module docstring's forms) -> Workload; UserError naming `origin`."""
    try:
        if isinstance(d, list):
            d = {"samples": d}
        if not isinstance(d, dict):
            raise _Bad(f"a JSON {type(d).__name__}, not a workload object or a list of prompt lengths")
        unknown = [k for k in d if k not in KEYS and not (isinstance(k, str) and k.startswith("_"))]
        if unknown:
            close = difflib.get_close_matches(unknown[0], KEYS, n=1)
            raise _Bad(f"unknown key {unknown[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        reps, ws, ln = _prompts(d)
        out = d.get("output_tokens", 512)
        mix = None
        if isinstance(out, dict):
            if ln is None:
                raise _Bad("a log-normal output_tokens needs a log-normal prompt_tokens too")
            on = _log_normal(out, "output_tokens", Mix.output_min, Mix.output_max)
            mix = Mix(
                prompt_median=ln[0],
                prompt_sigma=ln[1],
                prompt_min=ln[2],
                prompt_max=ln[3],
                output_median=on[0],
                output_sigma=on[1],
                output_min=on[2],
                output_max=on[3],
            )
            output = max(1, int(round(clipped_log_normal_mean(*on))))
        else:
            if ln is not None:
                raise _Bad("a log-normal prompt_tokens needs a log-normal output_tokens ({median, sigma, min, max})")
            output = _whole(out, "output_tokens", 1, MAX_PROMPT_TOKENS)
        slos = {}
        for k in ("ttft_slo_ms", "tbt_slo_ms"):
            v = d.get(k)
            slos[k] = None if v is None else _number(v, k)
            if slos[k] is not None and not slos[k] > 0:
                raise _Bad(f"{k} {slos[k]:g} is not a positive time")
        for k in ("name", "description"):
            if k in d and not isinstance(d[k], str):
                raise _Bad(f"{k} is {_show(d[k])}, not a string")
        return Workload(
            name=d.get("name", name),
            prompt_tokens=reps,
            weights=ws,
            output_tokens=output,
            concurrency=_whole(d.get("concurrency", 8), "concurrency", 1, MAX_CONCURRENCY),
            decode_weight=_real(d.get("decode_weight", 0.3), "decode_weight", 0.0, 1.0),
            ttft_slo_ms=slos["ttft_slo_ms"],
            tbt_slo_ms=slos["tbt_slo_ms"],
            description=d.get("description", ""),
            form="log-normal" if mix else "lengths",
            mix=mix,
            source=source,
        )
    except _Bad as e:
        raise UserError(f"{origin}: {e}", FIX) from None


def workload_from_trace(path: str) -> Workload:
    """A trace file as a workload: its prompts' quantile bins and mean output for search, its
    requests for simulate."""
    info = scan_trace(path)
    reps, ws = quantile_bins(info.prompt_tokens, BINS)
    return Workload(
        name=Path(path).name,
        prompt_tokens=reps,
        weights=ws,
        output_tokens=max(1, int(round(info.output_tokens.mean()))),
        description=f"trace of {info.rows:,} requests",
        form="trace",
        trace=info,
        source="file",
    )


def parse_json_text(text: str, origin: str) -> object:
    """JSON text -> value; one-line UserError with line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        hint = "; one request per line is a trace: name it .jsonl" if e.msg == "Extra data" else ""
        raise UserError(
            f"{origin} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}{hint})",
            "fix the file (" + FIX + ")",
        ) from None
    except ValueError as e:  # a number beyond Python's integer-string limit
        raise UserError(
            f"{origin} holds a number kttune cannot read ({' '.join(str(e).split())[:80]})", "fix the file"
        ) from None
    except RecursionError:
        raise UserError(f"{origin} is nested too deeply to be a workload", "fix the file (" + FIX + ")") from None


def preset_names() -> list[str]:
    root = resources.files("kttune.profiles") / "workloads"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def _load_file(spec: str) -> Workload:
    path = Path(spec)
    if not path.is_file():
        raise UserError(
            f"workload file {spec!r} does not exist",
            "pass a JSON workload, a trace (.csv / .jsonl) or a preset: " + ", ".join(preset_names()),
        )
    if path.suffix != ".json":
        return workload_from_trace(spec)
    origin = f"workload file {spec!r}"
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise UserError(
                f"{origin} is {size / 2**20:,.0f} MiB, more than the {MAX_JSON_BYTES >> 20} MiB a JSON workload may be",
                'bin the lengths ({"prompt_tokens": [...], "weights": [...]}), or pass requests as a trace (.csv), which kttune streams',
            )
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(
            f"cannot read {origin} ({getattr(e, 'strerror', None) or e})",
            "pass a UTF-8 JSON file or a preset: " + ", ".join(preset_names()),
        ) from None
    return workload_from_dict(parse_json_text(text, origin), path.stem, origin)


def load_workload(spec: str) -> Workload:
    """A preset name (`kttune workloads` lists them), a JSON workload file or a trace file."""
    path = Path(spec)
    if path.suffix in (".json", *TRACE_SUFFIXES) or path.exists() or "/" in spec:
        return _load_file(spec)
    names = preset_names()
    if spec not in names:
        close = difflib.get_close_matches(spec, names, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UserError(
            f"unknown workload {spec!r}",
            f"{hint}presets: {', '.join(names)}; or pass a JSON file or a trace (.csv / .jsonl)",
        )
    text = (resources.files("kttune.profiles") / "workloads" / f"{spec}.json").read_text()
    return workload_from_dict(parse_json_text(text, f"preset {spec!r}"), spec, f"preset {spec!r}", source="preset")


def simulation_statistics(wl: Workload) -> dict:
    """Mean, p50, p90 and max of the prompt and output lengths simulate draws (log-normal: over a
    fixed sample of 20,000; a trace: over all its requests; lengths: of the weighted lengths)."""
    if wl.mix is not None:
        return mix_statistics(wl.mix)
    if wl.trace is not None:
        return wl.trace.statistics()
    c = LengthCounts()
    c.add(np.array(wl.prompt_tokens, dtype=np.int64), np.array(wl.weights))
    o = wl.output_tokens
    return {"prompt_tokens": c.statistics(), "output_tokens": {"mean": float(o), "p50": o, "p90": o, "max": o}}
