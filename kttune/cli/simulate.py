"""`kttune simulate`: serve a workload in simulation under the chunked, hybrid and layered
schedules and print them side by side. Parse, call kttune.app.simulate, render
(kttune.emit.simulate_report)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kttune import bounds
from kttune.cli.bounds import bounded
from kttune.cli.options import (
    Chunk,
    Cpuinfer,
    GpuExperts,
    TpGpus,
    Json,
    KtMethod,
    KvTokens,
    MaxRunning,
    Model,
    Profile,
    Report,
    Seed,
    Threshold,
    Workload,
)

ArrivalRate = Annotated[
    float,
    bounded(
        "--rate",
        rule=bounds.RATE_PER_S,
        help="Poisson arrival rate, requests/s (default: half what an idle server sustains, "
        "the lower of prefill one mean prompt at a time and the running requests "
        "decoding their mean output; traces: rescales their arrivals).",
    ),
]


def simulate(
    model: Model = None,
    workload: Workload = None,
    from_search: Annotated[
        str,
        typer.Option(
            "--from-search",
            help="A `kttune search --json` (or `explain --json`) result: "
            "simulate its pick (its model, profile, flags, workload, "
            "and its SLO's rate, limits and request count); options "
            "given override them.",
        ),
    ] = None,
    rate: ArrivalRate = None,
    requests: Annotated[
        int,
        bounded(
            "--requests",
            rule=bounds.REQUESTS,
            help="Requests to simulate (default 1000; traces: all their rows). Metrics are online: "
            "memory does not grow with the count.",
        ),
    ] = None,
    seed: Seed = None,
    profile: Profile = None,
    method: KtMethod = None,
    gpus: TpGpus = None,
    gpu_experts: GpuExperts = None,
    chunk: Chunk = None,
    threshold: Threshold = None,
    max_total_tokens: KvTokens = None,
    max_running: MaxRunning = None,
    cpuinfer: Cpuinfer = None,
    schedules: Annotated[
        Optional[str],
        typer.Option(
            "--schedules",
            help="Comma-separated schedules of the simulator (docs/simulate.md). Default: every one, side by side.",
            show_default=False,
        ),
    ] = None,
    groups: Annotated[
        int,
        bounded(
            "--groups",
            rule=bounds.LAYER_COUNT,
            help="Layered: fixed layer-group count (default: the paper's rule, ceil(tokens / 512)).",
        ),
    ] = None,
    large_chunk: Annotated[
        int,
        bounded(
            "--large-chunk",
            rule=bounds.FORWARD_TOKENS,
            help="Layered: prompt tokens staged at once (longer prompts are cut).",
        ),
    ] = 8192,
    ttft_slo: Annotated[
        str, typer.Option("--ttft-slo", help="TTFT limit, e.g. 10s (default: the workload's, else 10 s).")
    ] = None,
    tbt_slo: Annotated[
        str,
        typer.Option(
            "--tbt-slo",
            help="Limit on every gap between tokens, e.g. 150ms (default: the "
            "workload's, else 5 x a 32-request decode step at 4K "
            "context).",
        ),
    ] = None,
    router_skew: Annotated[
        float,
        bounded(
            "--router-skew", rule=bounds.ROUTER_SKEW, help="Zipf exponent of expert popularity (0 = uniform routing)."
        ),
    ] = 0.0,
    capacity: Annotated[
        bool, typer.Option("--capacity", help="Also find each schedule's highest rate with >= 90% SLO attainment.")
    ] = False,
    samples: Annotated[
        bool,
        typer.Option(
            "--samples",
            help="Put per-request TTFT and longest gap in the JSON (for plots; a "
            "uniform sample of 10,000 requests in longer runs).",
        ),
    ] = False,
    json_out: Json = False,
    report_dir: Report = None,
):
    """Simulate a server under token-chunked (KT path switch), pure hybrid and Layered Prefill schedules.

    The model comes from --model or --from-search; the workload from --workload, else the
    search's (--from-search), else rag (the search's default)."""
    from kttune import app
    from kttune.app import resolve
    from kttune.cli.common import console as make_console, emit_json
    from kttune.emit.progress import simulate_progress
    from kttune.emit.simulate_report import render

    app.check_report_extras(report_dir)
    console = make_console(json_out)
    inp = app.simulation_inputs(
        model=model,
        profile=profile,
        method=method,
        workload=workload,
        rate=rate,
        requests=requests,
        seed=seed,
        gpu_experts=gpu_experts,
        chunk=chunk,
        threshold=threshold,
        max_total_tokens=max_total_tokens,
        max_running_requests=max_running,
        cpuinfer=cpuinfer,
        gpus=gpus,
        schedules=resolve.words([schedules]) if schedules else None,
        groups=groups,
        large_chunk=large_chunk,
        ttft_slo_s=resolve.seconds(ttft_slo, "--ttft-slo"),
        tbt_slo_ms=resolve.milliseconds(tbt_slo, "--tbt-slo"),
        router_skew=router_skew,
        from_search=from_search,
    )
    with simulate_progress(console) as on_progress:
        rep = app.simulate(inp, with_capacity=capacity, samples=samples, on_progress=on_progress)
    render(console, rep)
    doc = rep.to_dict()
    if json_out:
        emit_json(doc)
    if report_dir:
        from kttune.cli.report import print_written
        from kttune.emit.markdown_report import sim_result

        print_written(app.write_command_report(report_dir, sims=[sim_result(doc)]), stderr=json_out)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
