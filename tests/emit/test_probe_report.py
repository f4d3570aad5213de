"""Profile tables: every measured point of a shipped profile is shown."""

from __future__ import annotations

from rich.console import Console

from kttune.emit.probe_report import _fmt_ms, render_profile
from kttune.hw.registry import default_shipped_name, load_shipped


def test_every_cpu_moe_and_stage_a_point_is_printed():
    p = load_shipped(default_shipped_name())
    console = Console(record=True, width=400)
    render_profile(p, console)
    text = console.export_text()
    assert p.fingerprint in text and p.provenance.machine in text
    for c in p.curves:
        if c.kind == "cpu_moe":
            for pt in c.points:
                assert f"{_fmt_ms(pt.t_ms)}" in text and f"{pt.x / pt.t_ms * 1e3:,.0f}/s" in text
        if c.kind == "stage_a_write":
            for pt in c.points:
                assert f"{pt.x / pt.t_ms / 1e6:.1f}" in text
    kinds = {c.kind for c in p.curves}
    assert all(f"{k} curves" in text for k in kinds - {"cpu_moe", "stage_a_write"})
