"""`kttune simulate`: serve a workload in simulation under the chunked, hybrid and layered
schedules and print them side by side. Thin: parse, call kttune.sim, render."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kttune import bounds
from kttune.cli_bounds import bounded
from kttune.cli_common import MODEL_HELP
from kttune.cli_report import check_report_extras, report_option, write_command_report

from kttune.units import parse_duration_s


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        model: str = typer.Option(..., "--model", "-m", help=MODEL_HELP),
        workload: str = typer.Option("summarize", "--workload", "-w", help="summarize | chat (presets with stated statistics) or a trace file (.csv / .jsonl of arrival_s, prompt_tokens, output_tokens)."),
        rate: float = bounded(None, "--rate", rule=bounds.RATE_PER_S, help="Poisson arrival rate, requests/s (presets: default half the rate at which idle-server prefill of the mean prompt fills the server; traces: rescales their arrivals)."),
        requests: int = bounded(1000, "--requests", rule=bounds.REQUESTS, help="Requests to simulate (presets)."),
        seed: int = bounded(0, "--seed", rule=bounds.SEED, help="Seed of the request sample."),
        profile: str = typer.Option(None, "--profile", help="Hardware profile (file or shipped name, `kttune profiles`)."),
        method: str = typer.Option(None, "--kt-method", help="Override the detected KT method."),
        gpus: int = bounded(1, "--gpus", rule=bounds.GPUS, help="GPUs (tensor-parallel size)."),
        gpu_experts: int = bounded(0, "--gpu-experts", rule=bounds.GPU_EXPERTS, help="--kt-num-gpu-experts (per MoE layer)."),
        chunk: int = bounded(8192, "--chunk", rule=bounds.FORWARD_TOKENS, help="--chunked-prefill-size (tokens)."),
        threshold: int = bounded(None, "--threshold", rule=bounds.THRESHOLD_TOKENS, help="--kt-gpu-prefill-token-threshold (default min(4096, chunk) for layerwise methods, else 0)."),
        max_total_tokens: int = bounded(262144, "--max-total-tokens", rule=bounds.KV_TOKENS, help="KV pool size in tokens."),
        max_running: int = bounded(32, "--max-running-requests", rule=bounds.RUNNING_REQUESTS, help="--max-running-requests."),
        cpuinfer: int = bounded(None, "--cpuinfer", rule=bounds.THREADS, help="--kt-cpuinfer threads (default: the most measured below the core count)."),
        schedules: str = typer.Option("chunked,hybrid,layered", "--schedules", help="Comma-separated: chunked, hybrid, layered."),
        groups: int = bounded(None, "--groups", rule=bounds.LAYER_COUNT, help="Layered: fixed layer-group count (default: the paper's rule, ceil(tokens / 512))."),
        large_chunk: int = bounded(8192, "--large-chunk", rule=bounds.FORWARD_TOKENS, help="Layered: prompt tokens staged at once (longer prompts are cut)."),
        ttft_slo: str = typer.Option(None, "--ttft-slo", help="TTFT limit, e.g. 10s (default: the preset's)."),
        tbt_slo: str = typer.Option(None, "--tbt-slo", help="Limit on every gap between tokens, e.g. 150ms (default: the preset's; traces: 5 x a 32-request decode step at 4K context)."),
        router_skew: float = bounded(0.0, "--router-skew", rule=bounds.ROUTER_SKEW, help="Zipf exponent of expert popularity (0 = uniform routing)."),
        capacity: bool = typer.Option(False, "--capacity", help="Also find each schedule's highest rate with >= 90% SLO attainment."),
        samples: bool = typer.Option(False, "--samples", help="Put per-request TTFT and longest gap in the JSON (for plots)."),
        json_out: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout (the table goes to stderr)."),
        report_dir: Path = report_option(),
    ):
        """Simulate a server under token-chunked (KT path switch), pure hybrid and Layered Prefill schedules."""
        check_report_extras(report_dir)
        from rich.console import Console

        from kttune.api import this_machine_inventory
        from kttune.emit.simulate_report import render
        from kttune.sim.inputs import resolve
        from kttune.sim.simulate import simulate as run

        console = Console(stderr=json_out)
        inp = resolve(model, profile, method, workload, rate, requests,
                      seed, gpu_experts, chunk, threshold, max_total_tokens, max_running, cpuinfer, gpus,
                      tuple(s.strip() for s in schedules.split(",") if s.strip()), groups, large_chunk,
                      parse_duration_s(ttft_slo, "--ttft-slo") if ttft_slo else None,
                      parse_duration_s(tbt_slo, "--tbt-slo", bare_unit="ms") * 1e3 if tbt_slo else None, router_skew,
                      None if profile else this_machine_inventory())
        with console.status("simulating") as st:
            rep = run(inp, with_capacity=capacity, samples=samples, on_step=lambda msg: st.update(msg))
        render(console, rep)
        if json_out:
            typer.echo(json.dumps(rep.to_dict(), indent=1))
        if report_dir:
            from kttune.emit.markdown_report import sim_result

            write_command_report(report_dir, json_out, sims=[sim_result(rep.to_dict())])
