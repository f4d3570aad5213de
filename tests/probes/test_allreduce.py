"""The all-reduce probe over gloo (two CPU processes): a curve the cost model reads at TP 2."""

from dataclasses import replace

import pytest


def test_gloo_allreduce_curve_feeds_the_tp_cost():
    from kttune.cost.components import Components
    from kttune.hw.registry import load_shipped
    from kttune.probes.allreduce import probe_allreduce
    from kttune.spec.loader import load_model

    c = probe_allreduce(2, backend="gloo", quick=True, repeats=3, timeout_s=120)
    assert c.kind == "allreduce" and c.params["ranks"] == 2 and c.params["backend"] == "gloo"
    assert [p.x for p in c.points] == [1 << 16, 1 << 20, 1 << 24]
    assert all(p.t_ms > 0 for p in c.points)
    assert c.points[-1].t_ms > c.points[0].t_ms  # 256x the bytes takes longer
    prof = load_shipped("h200-pcie5-xeon-amx-16c")
    spec = load_model("qwen3-30b-a3b")
    tp2 = Components(replace(prof, curves=prof.curves + (c,)), spec, "BF16", tp=2)
    # read back between the measured sizes: monotone in bytes and within the measured range
    mid = tp2.allreduce_ms(1 << 22)
    assert c.points[0].t_ms * 0.5 < mid < c.points[-1].t_ms * 1.5
    assert tp2.allreduce_layer_ms(4096) == pytest.approx(2 * tp2.allreduce_ms(4096 * spec.hidden_size * 2))
    assert Components(prof, spec, "BF16", tp=1).allreduce_layer_ms(4096) == 0.0
    est = Components(prof, spec, "BF16", tp=2)  # no curve: the ring estimate, said so
    assert est.allreduce_ms(1 << 24) > 0 and any("all-reduce" in n for n in est.notes)
