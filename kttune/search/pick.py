"""Pareto front and the pick by the user's priority. Pure."""

from __future__ import annotations

from kttune.search.evaluate import Evaluation


def pareto_front(evals: list[Evaluation]) -> list[Evaluation]:
    """Configurations no other beats on both prefill time (lower) and decode throughput (higher),
    one per distinct (time, throughput) point, sorted by prefill time."""
    pts = sorted(evals, key=lambda e: (e.mean_ttft_ms, -e.decode_tok_s, -e.cfg.max_total_tokens))
    front: list[Evaluation] = []
    best_dec = float("-inf")
    for e in pts:
        if e.decode_tok_s > best_dec + 1e-9:
            front.append(e)
            best_dec = e.decode_tok_s
    return front


def pick(front: list[Evaluation], decode_weight: float) -> Evaluation:
    """Minimise (1-w) * ttft / best_ttft + w * best_decode / decode: both terms are 1 at their own
    optimum, so w is the share of importance the user gives decode speed."""
    best_t = min(e.mean_ttft_ms for e in front)
    best_d = max(e.decode_tok_s for e in front)
    w = decode_weight

    def score(e: Evaluation) -> tuple:
        return ((1 - w) * e.mean_ttft_ms / best_t + w * best_d / e.decode_tok_s, -e.cfg.max_total_tokens)

    return min(front, key=score)
