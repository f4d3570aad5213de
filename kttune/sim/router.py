"""The router model: how many distinct experts a batch of tokens activates.

Each token picks `top_k` distinct experts of `num_experts`. Expert i is in a token's set with
probability q_i (the sum of q over experts is top_k), independently across tokens, so the expected
number of distinct experts b tokens activate is

    D(b) = sum_i 1 - (1 - q_i)^b.

Popularity is Zipf-like: expert of rank r has weight r^-skew. skew = 0 is uniform routing
(q_i = k/E, the formula kttune.cost.features.expected_experts_touched holds, which this module calls
so the two never disagree); larger skew concentrates tokens on fewer experts, so a batch touches
fewer of them. The inclusion probabilities are the weights scaled to sum to k and capped at 1, the
excess of capped experts spread over the others in proportion to their weights (probability
proportional to size, a standard sampling design); `sample_topk` draws top-k sets with exactly these
inclusion probabilities (systematic PPS sampling), which is how the formula is checked.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache

from kttune.cost.features import expected_experts_touched


@lru_cache(maxsize=256)
def inclusion_probabilities(num_experts: int, top_k: int, skew: float) -> tuple[float, ...]:
    """q_i per expert (ordered by popularity), summing to top_k, each in (0, 1]."""
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k {top_k} outside 1..{num_experts}")
    if skew < 0:
        raise ValueError(f"skew {skew} is negative")
    if not math.isfinite(skew):
        raise ValueError(f"skew {skew} is not finite")
    logw = [-skew * math.log(r) for r in range(1, num_experts + 1)]  # log r^-skew: no underflow at large skew
    capped = [False] * num_experts
    q = [0.0] * num_experts
    while True:
        free = [i for i in range(num_experts) if not capped[i]]
        if not free:
            break
        budget = top_k - (num_experts - len(free))
        top = max(logw[i] for i in free)
        w = {i: math.exp(logw[i] - top) for i in free}  # relative to the most popular free expert (1)
        total = sum(w.values())
        over = False
        for i in free:
            q[i] = budget * w[i] / total
            if q[i] >= 1.0:
                capped[i] = True
                over = True
        if not over:
            break
    return tuple(1.0 if c else x for c, x in zip(capped, q))


def expected_distinct_experts(tokens: float, top_k: int, num_experts: int, skew: float = 0.0) -> float:
    """Expected distinct experts `tokens` tokens activate in one MoE layer (module docstring)."""
    if tokens <= 0:
        return 0.0
    if skew == 0.0:
        return expected_experts_touched(tokens, top_k, num_experts, num_experts)
    return sum(1.0 - (1.0 - q) ** tokens for q in inclusion_probabilities(num_experts, top_k, skew))


def activated_fraction(tokens: float, top_k: int, num_experts: int, skew: float = 0.0) -> float:
    """Share of a layer's experts `tokens` tokens activate: expected_distinct_experts / E."""
    return expected_distinct_experts(tokens, top_k, num_experts, skew) / num_experts


def sample_topk(rng: random.Random, num_experts: int, top_k: int, skew: float = 0.0) -> list[int]:
    """One token's expert set, drawn by systematic PPS sampling over a random order: exactly top_k
    distinct experts, expert i included with probability q_i."""
    q = list(inclusion_probabilities(num_experts, top_k, skew))
    order = list(range(num_experts))
    rng.shuffle(order)
    u = rng.random()
    picked, acc, nxt = [], 0.0, u
    for i in order:
        acc += q[i]
        while nxt < acc - 1e-12 and len(picked) < top_k:
            picked.append(i)
            nxt += 1.0
    return picked


def monte_carlo_distinct(tokens: int, top_k: int, num_experts: int, skew: float, trials: int, seed: int = 0) -> float:
    """Mean distinct experts over `trials` batches of `tokens` sampled tokens (for checking)."""
    rng = random.Random(seed)
    total = 0
    for _ in range(trials):
        seen: set[int] = set()
        for _ in range(tokens):
            seen.update(sample_topk(rng, num_experts, top_k, skew))
        total += len(seen)
    return total / trials
