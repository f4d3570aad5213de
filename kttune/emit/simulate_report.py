"""Rendering of `kttune simulate`: the schedules side by side (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kttune.emit.terminal import first_that_fits, keep_title, ms_short, tight_table
from kttune.sim.simulate import SimulationReport

GB = 1e9


def _s(v: float) -> str:
    return "-" if v != v else (f"{v:.2f} s" if v < 100 else f"{v:,.0f} s")


def _ms(v: float) -> str:
    return "-" if v != v else (f"{v:.0f} ms" if v < 10000 else f"{v / 1e3:.1f} s")


def render(console: Console, rep: SimulationReport) -> None:
    wl = rep.workload
    st = wl["statistics"]
    console.print(f"[bold]{rep.model}[/] with [bold]{rep.method}[/] on {rep.profile}")
    console.print(
        f"flags: chunk {rep.flags['chunked_prefill_size']}, "
        f"threshold {rep.flags['gpu_prefill_token_threshold']}, GPU experts {rep.flags['num_gpu_experts']}, "
        f"KV {rep.flags['max_total_tokens']:,} tokens,"
    )
    console.print(f"max running requests {rep.flags['max_running_requests']}")
    rate = f"{wl['rate_per_s']:g} req/s" if wl.get("rate_per_s") else "trace arrivals"
    console.print(f"workload: {wl['name']} ({wl['source']}), {wl['requests']} requests at {rate}")
    console.print(
        f"prompt mean "
        f"{st['prompt_tokens']['mean']:,.0f} / p90 {st['prompt_tokens']['p90']:,} tokens, output mean "
        f"{st['output_tokens']['mean']:,.0f}"
    )
    console.print(f"SLO: TTFT <= {rep.slo.ttft_s:g} s and every gap <= {rep.slo.tbt_ms:g} ms")
    console.print(
        first_that_fits(
            console.width,
            lambda: _full_table(rep),
            lambda: _compact_table(rep),
            lambda: _compact_table(rep, narrow=True),
        )
    )
    for n in rep.notes:
        console.print(f"[dim]note: {n}[/]")
    inexact = [r for r in rep.schedules if not r.quantiles_exact]
    if inexact:
        console.print(
            f"[dim]note: percentiles within {inexact[0].quantile_relative_error:.1%} of the exact ones "
            f"(a fixed-size histogram past the first million requests); counts, means, maxima and SLO "
            f"attainment exact[/]"
        )


def _table(rep: SimulationReport, rows, caption: str | None = None, narrow: bool = False) -> Table:
    """`narrow`: the 60-column frame (kttune.emit.terminal.tight_table), the capacity in req/s bare."""
    t = (
        tight_table("schedules side by side", caption)
        if narrow
        else Table(title="schedules side by side", show_edge=False, caption=caption)
    )
    t.add_column("", no_wrap=True)
    for r in rep.schedules:
        t.add_column(r.schedule, justify="right", no_wrap=True)
    for label, f in rows:
        t.add_row(label, *(f(r) for r in rep.schedules))
    if rep.capacity:
        caps = {c.schedule: c for c in rep.capacity}
        unit = "" if narrow else " req/s"
        label = (
            f"max req/s, {rep.capacity[0].target_attainment:.0%} SLO"
            if narrow
            else f"max rate at >= {rep.capacity[0].target_attainment:.0%} SLO"
        )
        t.add_row(
            label,
            *(f"{caps[r.schedule].max_rate_per_s:.3g}{unit}" if r.schedule in caps else "-" for r in rep.schedules),
        )
    return keep_title(t)


def _busy(r) -> str:
    return f"{r.gpu_busy_s / max(1e-9, r.duration_s):.0%} / {r.cpu_busy_s / max(1e-9, r.duration_s):.0%}"


def _full_table(rep: SimulationReport) -> Table:
    return _table(
        rep,
        [
            ("TTFT p50 / p90 / p99", lambda r: f"{_s(r.ttft_s.p50)} / {_s(r.ttft_s.p90)} / {_s(r.ttft_s.p99)}"),
            ("TBT p50 / p90 / p99", lambda r: f"{_ms(r.tbt_ms.p50)} / {_ms(r.tbt_ms.p90)} / {_ms(r.tbt_ms.p99)}"),
            ("longest gap p99 (per request)", lambda r: _ms(r.max_tbt_ms.p99)),
            (
                "SLO attainment (TTFT, TBT)",
                lambda r: f"{r.attainment:.0%} ({r.ttft_attainment:.0%}, {r.tbt_attainment:.0%})",
            ),
            ("PCIe expert GB per prompt", lambda r: f"{r.traffic_prefill_per_prompt.pcie_bytes / GB:,.1f}"),
            ("HBM expert GB per prompt", lambda r: f"{r.traffic_prefill_per_prompt.hbm_bytes / GB:,.1f}"),
            ("layer loads per prompt", lambda r: f"{r.layer_loads_per_prompt:.1f}"),
            (
                "PCIe / HBM / host GB total",
                lambda r: (
                    f"{r.traffic_total.pcie_bytes / GB:,.0f} / {r.traffic_total.hbm_bytes / GB:,.0f} / "
                    f"{r.traffic_total.host_read_bytes / GB:,.0f}"
                ),
            ),
            ("GPU / CPU busy", _busy),
            ("mean decode batch", lambda r: f"{r.mean_decode_batch:.1f}"),
            ("longest prefill iteration", lambda r: _ms(r.longest_prefill_iteration_ms)),
            ("rejected (never fit the KV pool)", lambda r: str(r.rejected)),
        ],
    )


def _compact_table(rep: SimulationReport, narrow: bool = False) -> Table:
    """The 80-column form: one number per cell, short labels (the caption says what they mean);
    `narrow`: the same in the 60-column frame."""

    def ms(v: float) -> str:
        return "-" if v != v else ms_short(v)

    rows = [(f"TTFT p{q}", lambda r, q=q: ms(1e3 * getattr(r.ttft_s, f"p{q}"))) for q in (50, 90, 99)]
    rows += [(f"TBT p{q}", lambda r, q=q: ms(getattr(r.tbt_ms, f"p{q}"))) for q in (50, 90, 99)]
    rows += [
        ("longest gap p99", lambda r: ms(r.max_tbt_ms.p99)),
        ("SLO met", lambda r: f"{r.attainment:.0%}"),
        ("TTFT / TBT met", lambda r: f"{r.ttft_attainment:.0%} / {r.tbt_attainment:.0%}"),
        ("PCIe GB/prompt", lambda r: f"{r.traffic_prefill_per_prompt.pcie_bytes / GB:,.1f}"),
        ("HBM GB/prompt", lambda r: f"{r.traffic_prefill_per_prompt.hbm_bytes / GB:,.1f}"),
        ("loads/prompt", lambda r: f"{r.layer_loads_per_prompt:.1f}"),
        ("PCIe GB total", lambda r: f"{r.traffic_total.pcie_bytes / GB:,.0f}"),
        ("HBM GB total", lambda r: f"{r.traffic_total.hbm_bytes / GB:,.0f}"),
        ("host GB total", lambda r: f"{r.traffic_total.host_read_bytes / GB:,.0f}"),
        ("GPU / CPU busy", _busy),
        ("decode batch", lambda r: f"{r.mean_decode_batch:.1f}"),
        ("longest prefill", lambda r: ms(r.longest_prefill_iteration_ms)),
        ("rejected", lambda r: str(r.rejected)),
    ]
    return _table(
        rep,
        rows,
        caption="GB: expert weights; loads: layer loads;"
        + ("\n" if narrow else " ")
        + "rejected: never fit the KV pool",
        narrow=narrow,
    )
