"""Workloads: what the server will be asked to do. A prompt-length distribution (reduced to a few
weighted representative lengths), the output length, the decode concurrency to serve, and how much
decode speed matters against prefill. Named presets ship in profiles/workloads/; users pass a JSON
file of their own."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from kttune.errors import UserError


MAX_PROMPT_TOKENS = 1 << 24  # 16M tokens: above any served context (1M today)
MAX_CONCURRENCY = 1 << 16


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
        return replace(self, prompt_tokens=tuple(reps), weights=tuple(ws),
                       description=(self.description + f" (reduced to {len(reps)} measured lengths)").strip())

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
        return (f"workload {self.name}: prompts longer than the model's {context_len:,}-token context minus "
                f"{self.output_tokens} output tokens ({share:.0%} of requests, up to {self.max_prompt_tokens:,} "
                f"tokens) are modelled clipped to {cap:,} tokens")


def _representatives(samples: list[int], bins: int = 12) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Reduce a list of prompt lengths to at most `bins` quantile representatives (bin medians),
    each weighted by its share of requests."""
    s = sorted(samples)
    if len(s) <= bins:
        counts: dict[int, int] = {}
        for x in s:
            counts[x] = counts.get(x, 0) + 1
        xs = sorted(counts)
        return tuple(xs), tuple(counts[x] / len(s) for x in xs)
    reps, ws = [], []
    for b in range(bins):
        lo, hi = b * len(s) // bins, (b + 1) * len(s) // bins
        part = s[lo:hi]
        if part:
            reps.append(part[len(part) // 2])
            ws.append(len(part) / len(s))
    return tuple(reps), tuple(ws)


def workload_from_dict(d: dict, name: str, origin: str) -> Workload:
    try:
        if "samples" in d:
            samples = [int(x) for x in d["samples"]]
            if not samples:
                raise ValueError("samples is empty")
            prompts, weights = _representatives(samples)
        else:
            prompts = tuple(int(x) for x in d["prompt_tokens"])
            raw = [float(x) for x in d.get("weights", [1.0] * len(prompts))]
            if len(raw) != len(prompts):
                raise ValueError("prompt_tokens and weights differ in length")
            if not all(math.isfinite(w) and w >= 0 for w in raw):
                raise ValueError("weights must be finite and not negative")
            total = sum(raw)
            if total <= 0:
                raise ValueError("weights must sum to a positive number")
            weights = tuple(w / total for w in raw)
        if not prompts or min(prompts) <= 0:
            raise ValueError("prompt lengths must be positive")
        if max(prompts) > MAX_PROMPT_TOKENS:
            raise ValueError(f"a prompt of {max(prompts):,} tokens is longer than any model's context "
                             f"(kttune takes up to {MAX_PROMPT_TOKENS:,})")
        wl = Workload(
            name=d.get("name", name),
            prompt_tokens=tuple(prompts),
            weights=tuple(weights),
            output_tokens=int(d.get("output_tokens", 512)),
            concurrency=int(d.get("concurrency", 8)),
            decode_weight=float(d.get("decode_weight", 0.3)),
            ttft_slo_ms=float(d["ttft_slo_ms"]) if d.get("ttft_slo_ms") is not None else None,
            tbt_slo_ms=float(d["tbt_slo_ms"]) if d.get("tbt_slo_ms") is not None else None,
            description=d.get("description", ""),
        )
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
        raise UserError(
            f"{origin} is not a valid workload ({e})",
            'write {"prompt_tokens": [...], "weights": [...], "output_tokens": N, "concurrency": N, '
            '"decode_weight": 0..1} or {"samples": [prompt lengths...]}',
        ) from None
    if not 1 <= wl.output_tokens <= MAX_PROMPT_TOKENS or not 1 <= wl.concurrency <= MAX_CONCURRENCY:
        raise UserError(f"{origin}: output_tokens {wl.output_tokens} / concurrency {wl.concurrency} out of range",
                        f"use output_tokens 1..{MAX_PROMPT_TOKENS:,} and concurrency 1..{MAX_CONCURRENCY}")
    for slo in (wl.ttft_slo_ms, wl.tbt_slo_ms):
        if slo is not None and not (math.isfinite(slo) and slo > 0):
            raise UserError(f"{origin}: an SLO of {slo} ms is not a positive time", "fix ttft_slo_ms / tbt_slo_ms")
    if not 0.0 <= wl.decode_weight <= 1.0:
        raise UserError(f"{origin}: decode_weight {wl.decode_weight} is outside 0..1", "use 0 (prefill only) to 1 (decode only)")
    return wl


def preset_names() -> list[str]:
    root = resources.files("kttune.profiles") / "workloads"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_workload(spec: str) -> Workload:
    """A preset name (`kttune workloads` lists them) or a path to a JSON file."""
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise UserError(f"workload file {spec!r} does not exist", "pass a JSON file or a preset: " + ", ".join(preset_names()))
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read workload file {spec!r} ({getattr(e, 'strerror', None) or e})",
                            "pass a UTF-8 JSON file or a preset: " + ", ".join(preset_names())) from None
        except json.JSONDecodeError as e:
            raise UserError(f"workload file {spec!r} is not valid JSON (line {e.lineno}: {e.msg})", "fix the file") from None
        if isinstance(d, list):
            d = {"samples": d}
        return workload_from_dict(d, path.stem, f"workload file {spec!r}")
    names = preset_names()
    if spec not in names:
        import difflib

        close = difflib.get_close_matches(spec, names, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UserError(f"unknown workload {spec!r}", f"{hint}presets: {', '.join(names)}; or pass a JSON file")
    d = json.loads((resources.files("kttune.profiles") / "workloads" / f"{spec}.json").read_text())
    return workload_from_dict(d, spec, f"preset {spec!r}")

