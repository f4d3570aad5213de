"""`explain` (and `simulate`, `validate`) at a `--kt-cpuinfer` the profile did not measure: between two
measured counts it is interpolated (kttune.hw.thread_interp, through kttune.app.inputs.components_at);
outside them it is refused with the range and the probe that measures it."""

from __future__ import annotations

import pytest

from kttune.app import resolve_inputs
from kttune.app.search_explain import explain_flags
from kttune.errors import ParameterError
from kttune.units import GIB

SHIPPED = "h200-pcie5-xeon-amx-16c"


def test_explain_takes_a_count_between_two_measured_and_refuses_one_outside():
    inp = resolve_inputs("qwen3-30b-a3b", 32 * GIB, 1, SHIPPED)
    out = explain_flags(inp, 8, 8192, 2048, 65536, cpuinfer=12)
    ev = out.explanation.evaluation
    assert ev.cfg.cpuinfer_threads == 12
    assert any("--kt-cpuinfer 12 was not measured" in n for n in out.explanation.notes)
    # between the two measured counts' own predictions
    at = {t: explain_flags(inp, 8, 8192, 2048, 65536, cpuinfer=t).explanation.evaluation for t in (11, 13)}
    lo, hi = sorted(a.mean_ttft_ms for a in at.values())
    assert lo * 0.98 <= ev.mean_ttft_ms <= hi * 1.02
    with pytest.raises(ParameterError, match="not a thread count this profile measured") as e:
        explain_flags(inp, 8, 8192, 2048, 65536, cpuinfer=9)
    assert "between 11 and 15 (interpolated)" in str(e.value.fix) and "kttune probe --threads 9" in str(e.value.fix)
