"""How many of a workload's requests the KV pool lets SGLang run at once
(docs/sglang-kt.md#the-kv-pool-not---max-running-requests-bounds-concurrency). Pure.

SGLang's scheduler admits a waiting request only when the free KV pool, less what the running
requests still reserve for their outputs, holds the request's prompt plus its whole output
budget (`PrefillAdder.add_one_req` in sglang's `managers/schedule_policy.py`); a full pool makes
it retract running requests and prefill them again later. `--max-running-requests` is only an
upper bound on top of that. So a pool of K tokens runs about K / (prompt + output) requests at
once whatever `--max-running-requests` says, and the flag kttune prints follows from the pool.
"""

from __future__ import annotations

import math

from kttune.search.workload import Workload


def request_kv_tokens(workload: Workload) -> int:
    """KV tokens one request of the workload holds by its last token, at the mean prompt length:
    its prompt plus its output (what SGLang reserves for it at admission). The mean is rounded to a
    millionth of a token first: weights such as 0.2 leave float noise (5 prompts averaging 554 came
    out 554.0000000000001), which the ceiling would turn into a whole token more per request."""
    return math.ceil(round(workload.mean_prompt_tokens + workload.output_tokens, 6))


def requests_the_pool_holds(max_total_tokens: int, workload: Workload) -> int:
    """Requests of the workload's mean length that a pool of `max_total_tokens` holds at once
    (at least 1: the pool always holds the longest request, a search constraint)."""
    return max(1, max_total_tokens // max(1, request_kv_tokens(workload)))


def running_requests(max_total_tokens: int, workload: Workload) -> int:
    """`--max-running-requests` for a pool: the workload's concurrency, or what the pool holds of
    it when that is fewer (a larger flag would never be reached; SGLang would queue or retract)."""
    return max(1, min(workload.concurrency, requests_the_pool_holds(max_total_tokens, workload)))


def pool_tokens_for(workload: Workload) -> int:
    """The least pool that runs the workload's concurrency at its mean length at once."""
    return workload.concurrency * request_kv_tokens(workload)


def pool_note(max_total_tokens: int, max_running_requests: int, workload: Workload) -> str | None:
    """A warning when the pool holds fewer requests of the workload's mean length than the
    workload runs at once or `--max-running-requests` allows; None when it holds them all."""
    per = request_kv_tokens(workload)
    held = requests_the_pool_holds(max_total_tokens, workload)
    pool = f"the KV pool (--max-total-tokens {max_total_tokens:,}) holds {held} request(s) of {per:,} tokens (mean prompt + output)"
    if held < workload.concurrency:
        return (
            f"{pool}, not the {workload.concurrency} the workload runs at once: SGLang queues the rest (it admits a "
            f"request only when its prompt and output fit the pool); {pool_tokens_for(workload):,} tokens would hold them"
        )
    if held < max_running_requests:
        return f"--max-running-requests {max_running_requests} is never reached: {pool}"
    return None
