"""`kttune simulate`: serve a workload in simulation under the chunked, hybrid and layered
schedules and print them side by side. Thin: parse, call kttune.sim, render."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kttune import bounds
from kttune.cli_bounds import bounded
from kttune.cli_common import MODEL_HELP, WORKLOAD_HELP
from kttune.cli_report import check_report_extras, report_option, write_command_report

from kttune.units import parse_duration_s


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        model: str = typer.Option(None, "--model", "-m", help=MODEL_HELP),
        workload: str = typer.Option(None, "--workload", "-w", help=WORKLOAD_HELP),
        from_search: str = typer.Option(None, "--from-search", help="A `kttune search --json` (or `explain --json`) result: simulate its pick (its model, profile, flags, workload, and its SLO's rate, limits and request count); options given override them."),
        rate: float = bounded(None, "--rate", rule=bounds.RATE_PER_S, help="Poisson arrival rate, requests/s (default: half what an idle server sustains, the lower of prefill one mean prompt at a time and the running requests decoding their mean output; traces: rescales their arrivals)."),
        requests: int = bounded(None, "--requests", rule=bounds.REQUESTS, help="Requests to simulate (default 1000; traces: all their rows). Metrics are online: memory does not grow with the count."),
        seed: int = bounded(None, "--seed", rule=bounds.SEED, help="Seed of the request sample (default 0)."),
        profile: str = typer.Option(None, "--profile", help="Hardware profile (file or shipped name, `kttune profiles`)."),
        method: str = typer.Option(None, "--kt-method", help="Override the detected KT method."),
        gpus: int = bounded(None, "--gpus", rule=bounds.GPUS, help="GPUs (tensor-parallel size; default 1)."),
        gpu_experts: int = bounded(None, "--gpu-experts", rule=bounds.GPU_EXPERTS, help="--kt-num-gpu-experts (per MoE layer; default 0)."),
        chunk: int = bounded(None, "--chunk", rule=bounds.FORWARD_TOKENS, help="--chunked-prefill-size (tokens; default 8192)."),
        threshold: int = bounded(None, "--threshold", rule=bounds.THRESHOLD_TOKENS, help="--kt-gpu-prefill-token-threshold (default min(4096, chunk) for layerwise methods, else 0)."),
        max_total_tokens: int = bounded(None, "--max-total-tokens", rule=bounds.KV_TOKENS, help="KV pool size in tokens (default 262144)."),
        max_running: int = bounded(None, "--max-running-requests", rule=bounds.RUNNING_REQUESTS, help="--max-running-requests (default: the workload's concurrency)."),
        cpuinfer: int = bounded(None, "--cpuinfer", rule=bounds.THREADS, help="--kt-cpuinfer threads (default: the most measured below the core count)."),
        schedules: str = typer.Option("chunked,hybrid,layered", "--schedules", help="Comma-separated: chunked, hybrid, layered."),
        groups: int = bounded(None, "--groups", rule=bounds.LAYER_COUNT, help="Layered: fixed layer-group count (default: the paper's rule, ceil(tokens / 512))."),
        large_chunk: int = bounded(8192, "--large-chunk", rule=bounds.FORWARD_TOKENS, help="Layered: prompt tokens staged at once (longer prompts are cut)."),
        ttft_slo: str = typer.Option(None, "--ttft-slo", help="TTFT limit, e.g. 10s (default: the workload's, else 10 s)."),
        tbt_slo: str = typer.Option(None, "--tbt-slo", help="Limit on every gap between tokens, e.g. 150ms (default: the workload's, else 5 x a 32-request decode step at 4K context)."),
        router_skew: float = bounded(0.0, "--router-skew", rule=bounds.ROUTER_SKEW, help="Zipf exponent of expert popularity (0 = uniform routing)."),
        capacity: bool = typer.Option(False, "--capacity", help="Also find each schedule's highest rate with >= 90% SLO attainment."),
        samples: bool = typer.Option(False, "--samples", help="Put per-request TTFT and longest gap in the JSON (for plots; a uniform sample of 10,000 requests in longer runs)."),
        json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout (the table goes to stderr)."),
        report_dir: Path = report_option(),
    ):
        """Simulate a server under token-chunked (KT path switch), pure hybrid and Layered Prefill schedules.

        The model comes from --model or --from-search; the workload from --workload, else the
        search's (--from-search), else rag (the search's default)."""
        check_report_extras(report_dir)
        from rich.console import Console

        from kttune.api import this_machine_inventory
        from kttune.emit.progress import simulate_progress
        from kttune.emit.simulate_report import render
        from kttune.sim.inputs import resolve
        from kttune.sim.simulate import simulate as run

        console = Console(stderr=json_out)
        inp = resolve(model=model, profile=profile, method=method, workload=workload, rate=rate, requests=requests, seed=seed,
                      gpu_experts=gpu_experts, chunk=chunk, threshold=threshold, max_total_tokens=max_total_tokens,
                      max_running_requests=max_running, cpuinfer=cpuinfer, gpus=gpus,
                      schedules=tuple(s.strip() for s in schedules.split(",") if s.strip()), groups=groups,
                      large_chunk=large_chunk,
                      ttft_slo_s=parse_duration_s(ttft_slo, "--ttft-slo") if ttft_slo else None,
                      tbt_slo_ms=parse_duration_s(tbt_slo, "--tbt-slo", bare_unit="ms") * 1e3 if tbt_slo else None,
                      router_skew=router_skew, this_machine=None if profile else this_machine_inventory(),
                      from_search=from_search)
        with simulate_progress(console) as on_progress:
            rep = run(inp, with_capacity=capacity, samples=samples, on_progress=on_progress)
        render(console, rep)
        if json_out:
            typer.echo(json.dumps(rep.to_dict(), indent=1))
        if report_dir:
            from kttune.emit.markdown_report import sim_result

            write_command_report(report_dir, json_out, sims=[sim_result(rep.to_dict())])
