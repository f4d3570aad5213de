"""What reading a layer's experts from DRAM adds (kttune.hw.dram_stream), on the project's measurements."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kttune.hw.dram_stream import stream_ms_per_gb, stream_rate, touched_gb
from kttune.hw.profile import Curve, Point, load_profile

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks/results"


def _pair(folder: str, r: int, method: str = "BF16") -> tuple[Curve, Curve]:
    warm = load_profile(RESULTS / folder / f"cpu-moe-cold-warm-{r}.profile.json").curves_of("cpu_moe", method=method)[0]
    cold = next(
        c
        for c in load_profile(RESULTS / folder / f"cpu-moe-cold-cold-{r}.profile.json").curves_of(
            "cpu_moe", method=method
        )
        if c.params == warm.params
    )
    return warm, cold


def test_a_call_reads_the_experts_its_tokens_touch():
    """One token of top-8 of 32 touches 8 experts; many tokens touch all 32 (the layer's 96 MiB in BF16)."""
    warm, _ = _pair("2026-12-07-xeon-amx-2c", 1)
    expert = 1024 * 512 * 3 * 2 / 1e9
    assert touched_gb(warm, 1) == pytest.approx(8 * expert)
    assert touched_gb(warm, 1024) == pytest.approx(32 * expert)


@pytest.mark.parametrize(
    ("folder", "rounds", "low", "high"),
    [("2026-12-04-h200-pcie5-xeon-amx-16c", (1, 2), 4.0, 9.0), ("2026-12-07-xeon-amx-2c", (1, 2, 3), 15.0, 30.0)],
)
def test_the_cold_layer_costs_more_per_gb_touched_on_both_machines(folder, rounds, low, high):
    """The H200 box's 16-core instance (11 threads) and the development VM (1 thread): cold is slower
    than warm at every count from 4 to 256 tokens, and the rate each round reads lies in the band its
    machine's memory allows (a few ms per GB for 11 cores, tens for one); one round agrees with the
    next within 1.5x."""
    rates = []
    for r in rounds:
        warm, cold = _pair(folder, r)
        per = stream_ms_per_gb(warm, cold)
        assert all(v > 0 for t, v in per.items() if 4 <= t <= 256)
        rates.append(stream_rate(warm, cold))
    assert all(low < x < high for x in rates)
    assert max(rates) < 1.5 * min(rates)


def test_a_second_warm_timing_is_refused():
    """The calls of 2026-12-06 and 2026-12-07 whose 'cold' cycled over no copies (H100 instance o):
    no rate can be read from them, and saying one would be the mistake they were."""
    folder = RESULTS / "2026-12-06-h100-pcie5-xeon-amx-16c"
    warm = load_profile(folder / "quick-transfer-cold-warm-h100o.profile.json").curves_of("cpu_moe", method="BF16")[0]
    cold = next(
        c
        for c in load_profile(folder / "quick-transfer-cold-h100o.profile.json").curves_of("cpu_moe", method="BF16")
        if c.params == warm.params
    )
    with pytest.raises(ValueError, match="second warm timing"):
        stream_ms_per_gb(warm, cold)
    w, c = _pair("2026-12-07-xeon-amx-2c", 1)
    with pytest.raises(ValueError, match="one layer"):
        stream_ms_per_gb(w, replace(c, params={**c.params, "threads": 2}))
    with pytest.raises(ValueError, match="no token count"):
        stream_rate(
            w, replace(c, points=tuple(Point(x=p.x, t_ms=p.t_ms, extra=p.extra) for p in c.points if p.x > 256))
        )


def test_a_cpu_moe_curves_expert_is_counted_as_the_model_expert_is():
    """The bytes a `cpu_moe` curve's call reads per expert are the bytes the cost model counts for a
    model's expert of the same shape and method (host RAM: MXFP4's scales widened to bf16), in the
    fit's features and in the cache check alike."""
    from kttune.cost.components import Components
    from kttune.hw.curve_kinds import cpu_moe_row, host_expert_bytes
    from kttune.hw.dram_stream import expert_bytes
    from kttune.hw.registry import load_shipped
    from kttune.spec.loader import load_model
    from kttune.spec.methods import bytes_per_expert

    gpt = load_model("gpt-oss-20b", "MXFP4")
    shape = dict(hidden=gpt.hidden_size, inter=gpt.moe_intermediate_size, experts=gpt.num_experts, top_k=gpt.top_k)
    c = Curve(kind="cpu_moe", x_unit="tokens", params={"method": "MXFP4", "threads": 1, **shape}, points=())
    model_expert = Components(load_shipped("h200-pcie5-xeon-amx-16c"), gpt, "MXFP4").cpu_bytes_per_expert
    assert host_expert_bytes(c.shape) == expert_bytes(c) == model_expert
    assert model_expert > bytes_per_expert("mxfp4", gpt.hidden_size, gpt.moe_intermediate_size)
    _, nbytes, *_ = cpu_moe_row(c, 1e6)  # every expert touched
    assert nbytes == pytest.approx(gpt.num_experts * model_expert)
