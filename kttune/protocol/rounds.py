"""The measurement protocol's schedule: warm-up, repeats in interleaved rounds, outliers re-measured.

    protocol = Protocol(repeats=3)
    result = measure_rounds(items, sample, protocol, warm=warm)
    result.estimates[item]            # kttune.protocol.stats.Estimate

- Before an item's first timed sample, `warm(item)` runs (the caller knows what a new shape
  touches: kernels and their compilation, the allocator, kt-kernel's pool, attention at a new prompt
  length) and is counted.
- Round r measures every item once, in an order shuffled by (seed, r): a drift in the machine hits
  all items alike across rounds, and a round pairs the items' samples for `stats.compare`.
- `sample(item, round)` returns the value, or None when the item cannot be measured (it is dropped,
  with the reason `sample` gave through `unmeasurable`). `flag(item, value)` may name a reason to
  treat a sample as an outlier (the runner's disturbed forwards); the MAD rule finds the others
  (from 3 samples on). Each outlier found is replaced by one more sample at the end of the round
  it is found in (at most `max_remeasure` per item), so outliers cost samples, not precision.
- `known` holds samples of a previous run of the same schedule (resume): their rounds are not
  measured again. `on_sample(item, round, value)` sees each new sample (persist it there).
- `stop()` returning True ends the schedule after the current sample (a time budget): the estimates
  then hold what was measured.

Pure: no timing here, the caller's `sample` measures.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Generic, Hashable, Iterable, Mapping, Sequence, TypeVar

from kttune.protocol.stats import CONFIDENCE, OUTLIER_MADS, OUTLIER_MIN_REL, Estimate, estimate

T = TypeVar("T", bound=Hashable)


def prompt_seed(seed: int, round_index: int) -> int:
    """The seed of the prompt a timed run draws in round `round_index` of a measurement seeded `seed`:
    one draw per round, the same for every item of the round, so the items stay paired while the
    rounds sample the prompt-to-prompt spread (at a few tokens, the router's choice:
    docs/path-runner.md#one-prompt-draw-per-round)."""
    return seed + round_index


@dataclass(frozen=True)
class Protocol:
    repeats: int = 3  # timed samples per item (rounds)
    confidence: float = CONFIDENCE
    outlier_mads: float = OUTLIER_MADS
    outlier_min_rel: float = OUTLIER_MIN_REL
    max_remeasure: int = 2  # extra samples per item, to replace outliers
    seed: int = 0

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats {self.repeats} must be at least 1")
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence {self.confidence} must be in [0.5, 1)")

    def order(self, items: Sequence[T], round_index: int) -> list[T]:
        """Round `round_index`'s order: the items shuffled by (seed, round)."""
        out = list(items)
        random.Random(f"{self.seed}:{round_index}").shuffle(out)
        return out

    def estimate(
        self, samples: Sequence[float], rounds: Sequence[int], flags: Mapping[int, str] | None = None
    ) -> Estimate:
        return estimate(samples, self.confidence, rounds, flags, self.outlier_mads, self.outlier_min_rel)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Samples(Generic[T]):
    """What a schedule measured, per item: values with their rounds and flags, in measurement order."""

    values: dict = field(default_factory=dict)  # item -> [(round, value, flag or None)]
    unmeasurable: dict = field(default_factory=dict)  # item -> reason
    warmups: int = 0
    timed: int = 0
    order: list = field(default_factory=list)  # (round, item) in measurement order (this run's samples)

    def add(self, item: T, round_index: int, value: float, flag: str | None = None) -> None:
        self.values.setdefault(item, []).append((round_index, float(value), flag))

    def rounds_of(self, item: T) -> set[int]:
        return {r for r, _, _ in self.values.get(item, [])}

    def estimate(self, item: T, protocol: Protocol, upto: int | None = None) -> Estimate | None:
        """The item's estimate; `upto`: from its samples of rounds <= upto only (what was known then)."""
        vs = [v for v in self.values.get(item, []) if upto is None or v[0] <= upto]
        if not vs:
            return None
        return protocol.estimate(
            [v for _, v, _ in vs], [r for r, _, _ in vs], {i: f for i, (_, _, f) in enumerate(vs) if f}
        )


@dataclass
class RoundsResult(Generic[T]):
    estimates: dict  # item -> Estimate (items measured at least once)
    samples: Samples
    rounds: int  # rounds run (or resumed)
    stopped: bool = False  # ended early by `stop`

    def to_dict(self, key: Callable[[T], str] = str) -> dict:
        return {
            "rounds": self.rounds,
            "stopped": self.stopped,
            "warmups": self.samples.warmups,
            "timed_samples": self.samples.timed,
            "estimates": {key(k): e.to_dict() for k, e in self.estimates.items()},
            "unmeasurable": {key(k): r for k, r in self.samples.unmeasurable.items()},
        }


class _Stop(Exception):
    pass


def run_round(
    items: Sequence[T],
    round_index: int,
    sample: Callable[[T, int], float | None],
    protocol: Protocol,
    samples: Samples,
    *,
    warm: Callable[[T], None] | None = None,
    warmed: set | None = None,
    flag: Callable[[T, float], str | None] | None = None,
    unmeasurable: Callable[[T], str] | None = None,
    on_sample: Callable[[T, int, float], None] | None = None,
    stop: Callable[[], bool] | None = None,
) -> None:
    """One round over `items` (shuffled), skipping items that already have this round; then one
    re-measure of each item whose samples now hold a new outlier (within `max_remeasure`). Raises
    _Stop when `stop()` says so."""
    warmed = warmed if warmed is not None else set()

    def one(item: T) -> None:
        if item not in warmed:
            if warm is not None:
                warm(item)
                samples.warmups += 1
            warmed.add(item)
        v = sample(item, round_index)
        if v is None:
            samples.unmeasurable[item] = unmeasurable(item) if unmeasurable else "could not be measured"
            return
        f = flag(item, v) if flag else None
        samples.add(item, round_index, v, f)
        samples.timed += 1
        samples.order.append((round_index, item))
        if on_sample:
            on_sample(item, round_index, v)
        if stop and stop():
            raise _Stop

    for item in protocol.order(items, round_index):
        if item in samples.unmeasurable or round_index in samples.rounds_of(item):
            continue
        one(item)
    for item in protocol.order(items, round_index):
        if item in samples.unmeasurable:
            continue
        # as known at this round's end (a resumed schedule holds later rounds too); one re-measure
        # per item and round
        e = samples.estimate(item, protocol, upto=round_index)
        upto = [r for r, _, _ in samples.values.get(item, ()) if r <= round_index]
        extra = len(upto) - len(set(upto))
        if upto.count(round_index) > 1:
            continue
        if e is not None and len(e.outliers) > extra and extra < protocol.max_remeasure:
            one(item)  # an outlier not yet replaced: one more sample, paired with this round


def measure_rounds(
    items: Iterable[T],
    sample: Callable[[T, int], float | None],
    protocol: Protocol,
    *,
    warm: Callable[[T], None] | None = None,
    flag: Callable[[T, float], str | None] | None = None,
    unmeasurable: Callable[[T], str] | None = None,
    known: Mapping[T, Sequence[tuple[int, float, str | None]]] | None = None,
    on_sample: Callable[[T, int, float], None] | None = None,
    stop: Callable[[], bool] | None = None,
    rounds: int | None = None,
) -> RoundsResult:
    """Measure every item `rounds` (default `protocol.repeats`) times in interleaved rounds."""
    items = list(dict.fromkeys(items))
    samples: Samples = Samples()
    for item, vs in (known or {}).items():
        for r, v, f in vs:
            samples.add(item, r, v, f)
    n_rounds = protocol.repeats if rounds is None else rounds
    warmed: set = set()
    stopped = False
    try:
        for r in range(n_rounds):
            run_round(
                items,
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
    except _Stop:
        stopped = True
    est = {i: e for i in items if (e := samples.estimate(i, protocol)) is not None}
    return RoundsResult(est, samples, n_rounds, stopped)
