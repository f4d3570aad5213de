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
    # the pipeline has a table of its own (stages beside the layer time); it passed here before only
    # because a provenance note said "pipeline curves"
    assert all(f"{k} curves" in text for k in kinds - {"cpu_moe", "stage_a_write", "pipeline"})
    assert "pipeline: one full MoE layer" in text


def test_host_ram_curve_prints_a_table_with_skips_within_80_columns():
    from dataclasses import replace

    from kttune.probes.host_ram import HostRamPoint, host_ram_curve
    from kttune.spec.moe_shape import MoeLayerShape

    def pt(n: int, reserved: int) -> HostRamPoint:
        shape = MoeLayerShape(hidden=7168, inter=2048, experts=384, top_k=8, method="RAWINT4")
        return HostRamPoint(shape, "AMXInt4_KGroup_MOE", n, 1, 11, reserved, reserved - 2**20, 0)

    c = host_ram_curve(
        [pt(4096, 42 * 2**30), pt(1024, 41 * 2**30)], [{"x": 16384, "reason": "needs about 80 GiB, 60 GiB usable"}]
    )
    prof = load_shipped(default_shipped_name())
    console = Console(width=80, record=True)
    render_profile(replace(prof, curves=(c,)), console, inventory=False)
    text = console.export_text()
    assert "Host RAM of kt-kernel, H7168 I2048 E384 top-8" in text
    rows = [line for line in text.splitlines() if "RAWINT4" in line and "│" in line]
    assert [r.split("│")[2].strip() for r in rows] == ["1,024", "4,096", "16,384"]
    assert "41.0 GiB" in rows[0] and "skip" in rows[2]
    assert "host RAM RAWINT4 max_len 16384 skipped: needs about 80 GiB" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_where_kt_kernel_switches_gemm_kernels_is_printed_with_both_times():
    """docs/cost-model.md#kt-kernels-two-gemm-kernels: the H200 box's Kimi-K2 probe measured 192 (the
    last length on the vector GEMM) and 240; the line names both with their times. FP8's class has one
    kernel: no line."""
    from pathlib import Path

    from kttune.emit.probe_report import cpu_moe_switch_lines
    from kttune.hw.profile import load_profile

    box = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-04-h200-pcie5-xeon-amx-16c"
    p = load_profile(box / "probe-kimi-k2-thinking-switch.profile.json")
    (c,) = p.curves_of("cpu_moe")
    pts = {int(pt.x): pt.t_ms for pt in c.points}
    (line,) = cpu_moe_switch_lines([c])
    assert "up to 192 tokens" in line and f"{_fmt_ms(pts[192])} ms at 192" in line
    assert f"{_fmt_ms(pts[240])} ms at 240" in line
    fp8 = [c for c in load_shipped(default_shipped_name()).curves_of("cpu_moe") if c.params["method"] == "FP8"]
    assert fp8 and cpu_moe_switch_lines(fp8) == []


def test_a_disturbed_point_is_marked_in_its_table():
    """The development VM's probe beside a bursty neighbour (benchmarks/bench_probe_disturbed.py): the
    points the probe calls disturbed carry '*', the others not, and the caption says what it means."""
    from pathlib import Path

    from kttune.hw.point_quality import disturbed
    from kttune.hw.profile import load_profile

    path = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-04-epyc-avx512-2c"
    p = load_profile(path / "probe-disturbed-after-hog-1.profile.json")
    console = Console(record=True, width=400)
    render_profile(p, console)
    text = console.export_text()
    pts = [pt for c in p.curves_of("cpu_moe") for pt in c.points]
    bad = [pt for pt in pts if disturbed(pt)]
    assert bad and len(bad) < len(pts)
    for pt in pts:
        assert (f"{_fmt_ms(pt.t_ms)}*" in text) == (pt in bad)
    assert "* disturbed (see the notes)" in text and "points disturbed" in text


def test_the_host_s_uptime_is_shown_where_the_probe_read_it():
    from dataclasses import replace

    p = load_shipped(default_shipped_name())  # measured before profiles recorded it
    shown = replace(p, provenance=replace(p.provenance, host_uptime_s=66.8))
    for prof, want in ((shown, "the host up 1.1 min"), (p, None)):
        console = Console(record=True, width=400)
        render_profile(prof, console)
        text = console.export_text()
        assert (want in text) if want else ("the host up" not in text)


def _pipeline_rendered(name: str) -> str:
    """The pipeline table of a profile measured on the H100 box (2026-12-05), as printed."""
    from pathlib import Path

    from kttune.emit.probe_report import pipeline_table
    from kttune.hw.profile import load_profile

    folder = Path(__file__).resolve().parents[2] / "benchmarks/results/2026-12-05-h100-pcie5-xeon-amx-16c"
    p = load_profile(folder / name)
    console = Console(record=True, width=200)
    console.print(pipeline_table([c for c in p.curves if c.kind == "pipeline"]))
    return console.export_text()


def test_a_disturbed_full_layer_is_marked_in_the_pipeline_table():
    """The first quick probe of a fresh H100 instance streamed the 2.1 GB RAWINT4 layer at 11 threads
    in 116 ms after 32 ms for half of it (kttune.hw.point_quality.slow_per_byte): its layer time
    carries '*' and the caption says what it means; the next probe's table has no mark."""
    first = _pipeline_rendered("quick-transfer-h100b.profile.json")
    assert first.count("*") == 2 and "116*" in first and "* disturbed (see the notes)" in first
    assert "*" not in _pipeline_rendered("quick-transfer-h100b-again.profile.json")


def test_a_layer_timed_in_another_configuration_than_sglang_kts_loop_is_marked():
    """A quick probe before 2026-12-05 timed its pipeline curves in the stream configuration alone:
    every layer carries '+' and the caption says a server's loop was not timed; the probe since times
    the curves in the loop, and its table has no mark (docs/probe.md#the-pipeline)."""
    before = _pipeline_rendered("quick-transfer-h100c.profile.json")
    assert before.count("+") == 7 and "not sglang-kt's loop" in before  # 6 layers and the caption
    assert "+" not in _pipeline_rendered("quick-transfer-h100f.profile.json")


def test_a_busy_machines_profile_says_so_once():
    """H200 instance f's quick probe (2026-12-06), older than the busy rule: `profile show` says the
    machine was busy from its points; with the probe's own busy note in it, the line is not repeated;
    H100 instance t's probe of the same day is quiet."""
    from dataclasses import replace
    from pathlib import Path

    from kttune.hw.profile import load_profile
    from kttune.probes.common import busy_note

    results = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    f = load_profile(results / "2026-12-06-h200-pcie5-xeon-amx-16c" / "quick-transfer-h200f.profile.json")
    t = load_profile(results / "2026-12-06-h100-pcie5-xeon-amx-16c" / "quick-transfer-h100t.profile.json")
    said = replace(f, provenance=replace(f.provenance, notes=f.provenance.notes + (busy_note(f.curves),)))
    for prof, times in ((f, 1), (said, 1), (t, 0)):
        console = Console(record=True, width=400)
        render_profile(prof, console)
        assert console.export_text().count("busy while probed") == times
