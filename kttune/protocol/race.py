"""Deciding between configurations by measurement: a race (Maron and Moore's racing, as in F-race)
over interleaved rounds of `kttune.protocol.rounds`.

    result = race(items, sample, protocol, cost=cost, min_rounds=3, max_rounds=5)
    result.winner, result.decision, result.entries

- Every round measures every surviving item once, in a shuffled order; `sample(item, round)` is a
  value where higher is better (throughput).
- From `min_rounds` on, after each round, an item whose paired ratio to the current best (highest
  median) has its whole interval below 1 is out: it is slower, beyond noise. The race ends when one
  item is left or after `max_rounds`.
- The fastest survivor is the best measured. A survivor is tied with it within noise when their
  ratio's whole interval lies within 1 +- `tie_margin` (they are shown equivalent, not merely not
  told apart) and its median ratio is at least 1 - `tie_tolerance`; of the tied, the cheapest by
  `cost(item)` (a tuple, lower is cheaper: VRAM, GPU experts, threads) wins.
- A survivor neither out nor tied (an interval that holds 1 but is wider than the margin) is raced
  on against the best, alone, for up to `extra_rounds` more rounds. One still undecided then is
  not a tie: the faster median wins (a cheaper configuration is chosen only where the measurements
  show it gives nothing away). On the H200 box a tie declared on an interval of 0.87-1.17 had given
  the win to a configuration the grid then measured 8% slower ([0.89-0.94]).
The decision says which case it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Hashable, Mapping, Sequence, TypeVar

from kttune.protocol.rounds import Protocol, Samples, _Stop, run_round
from kttune.protocol.stats import Comparison, Estimate, compare

T = TypeVar("T", bound=Hashable)

TIE_TOLERANCE = 0.03
TIE_MARGIN = 0.05  # a tie: the ratio's interval within 1 +- this
EXTRA_ROUNDS = 3


@dataclass(frozen=True)
class RaceEntry(Generic[T]):
    item: T
    estimate: Estimate | None
    vs_best: Comparison | None  # this item / the best measured (None for the best itself)
    out_after_round: int | None  # eliminated after this round (None: survived)
    status: str  # "winner" | "best measured" | "tied" | "survived" | "eliminated" | "unmeasurable"
    reason: str = ""


@dataclass(frozen=True)
class RaceResult(Generic[T]):
    winner: T | None
    best_measured: T | None
    decision: str
    entries: tuple  # RaceEntry per item, in the order given
    rounds: int
    timed_samples: int
    warmups: int
    stopped: bool = False

    def entry(self, item: T) -> RaceEntry:
        return next(e for e in self.entries if e.item == item)


def _best(items: Sequence[T], est: Mapping[T, Estimate]) -> T | None:
    live = [i for i in items if i in est]
    return max(live, key=lambda i: est[i].median) if live else None


def race(
    items: Sequence[T],
    sample: Callable[[T, int], float | None],
    protocol: Protocol,
    *,
    cost: Callable[[T], tuple] | None = None,
    min_rounds: int | None = None,
    max_rounds: int = 5,
    tie_tolerance: float = TIE_TOLERANCE,
    tie_margin: float = TIE_MARGIN,
    extra_rounds: int = EXTRA_ROUNDS,
    warm: Callable[[T], None] | None = None,
    flag: Callable[[T, float], str | None] | None = None,
    unmeasurable: Callable[[T], str] | None = None,
    known: Mapping[T, Sequence[tuple[int, float, str | None]]] | None = None,
    on_sample: Callable[[T, int, float], None] | None = None,
    on_round: Callable[[int, list], None] | None = None,
    stop: Callable[[], bool] | None = None,
    describe: Callable[[T], str] = str,
) -> RaceResult:
    items = list(dict.fromkeys(items))
    lo_rounds = protocol.repeats if min_rounds is None else min_rounds
    max_rounds = max(max_rounds, lo_rounds)
    samples: Samples = Samples()
    for item, vs in (known or {}).items():
        for r, v, f in vs:
            samples.add(item, r, v, f)
    alive = list(items)
    out_after: dict = {}
    why: dict = {}
    warmed: set = set()
    stopped = False
    done = 0

    def estimates(upto: int | None = None) -> dict:
        """Per item; `upto`: from the rounds up to that one only (a resumed race holds later ones)."""
        return {i: e for i in items if (e := samples.estimate(i, protocol, upto)) is not None}

    def one_round(r: int, racing: list) -> None:
        nonlocal done
        run_round(
            racing,
            r,
            sample,
            protocol,
            samples,
            warm=warm,
            warmed=warmed,
            flag=flag,
            unmeasurable=unmeasurable,
            on_sample=on_sample,
            stop=stop,
        )
        done = r + 1
        for i in [i for i in alive if i in samples.unmeasurable]:
            alive.remove(i)
        est = estimates(r)
        if r + 1 >= lo_rounds and len(alive) > 1:
            best = _best(alive, est)
            for i in list(alive):
                if i == best or i not in est:
                    continue
                c = compare(est[best], est[i])
                if c.high < 1.0:
                    alive.remove(i)
                    out_after[i] = r + 1
                    why[i] = f"slower than {describe(best)}: ratio {c.short()} after {r + 1} rounds"
        if on_round:
            on_round(r + 1, list(alive))

    def tied(c: Comparison) -> bool:
        return c.low >= 1.0 - tie_margin and c.high <= 1.0 + tie_margin and c.ratio >= 1.0 - tie_tolerance

    def split(best: T, est: Mapping) -> tuple[list, list]:
        """The survivors besides `best`: (tied with it, neither out nor tied)."""
        ties, open_ = [], []
        for i in alive:
            if i != best and i in est:
                (ties if tied(compare(est[best], est[i])) else open_).append(i)
        return ties, open_

    try:
        for r in range(max_rounds):
            one_round(r, alive)
            if len(alive) <= 1 and r + 1 >= lo_rounds:
                break
        for r in range(done, done + extra_rounds):
            est = estimates(r - 1)  # the rounds done so far only: a resumed race holds later ones
            best = _best(alive, est)
            open_ = split(best, est)[1] if best is not None else []
            if not open_:
                break
            one_round(r, [best, *open_])
    except _Stop:
        stopped = True
    est = estimates()
    best = _best(alive, est) or _best(items, est)
    ties, open_ = split(best, est) if best is not None else ([], [])
    for i in open_:
        why[i] = f"not told apart from {describe(best)}: ratio {compare(est[best], est[i]).short()} after {done} rounds"
    winner = best
    if best is not None and ties:
        pool = [best, *ties]
        winner = min(pool, key=lambda i: (cost(i) if cost else (), pool.index(i)))
    if best is None:
        decision = "nothing could be measured"
    elif winner == best and not ties:
        decision = f"{describe(best)} is the fastest" + (
            "; every other was slower beyond noise"
            if len(alive) == 1
            else f"; {len(open_)} other(s) not told apart after {done} rounds (neither slower beyond noise "
            f"nor shown within {tie_margin:.0%} of it), so the faster median wins"
        )
    elif winner == best:
        decision = (
            f"{describe(best)} is the fastest and tied within noise with {len(ties)} other(s); "
            "it is also the cheapest of them"
        )
    else:
        c = compare(est[best], est[winner])
        decision = (
            f"{describe(winner)} is tied within noise with the fastest, {describe(best)} (ratio {c.short()}), "
            "and cheaper: it wins"
        )
    entries = []
    for i in items:
        e = est.get(i)
        if i in samples.unmeasurable:
            entries.append(RaceEntry(i, e, None, None, "unmeasurable", samples.unmeasurable[i]))
            continue
        vs = compare(est[best], e) if (e is not None and best is not None and i != best) else None
        if i == winner:
            status = "winner"
        elif i == best:
            status = "best measured"
        elif i in ties:
            status = "tied"
        elif i in out_after:
            status = "eliminated"
        else:
            status = "survived"
        entries.append(RaceEntry(i, e, vs, out_after.get(i), status, why.get(i, "")))
    return RaceResult(winner, best, decision, tuple(entries), done, samples.timed, samples.warmups, stopped)
