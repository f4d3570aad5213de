"""Serving simulation: one KTransformers + SGLang server under three prefill schedules.

Modules: `router` (distinct experts a batch activates), `workload` (request streams: Poisson
arrivals from a log-normal mix or weighted lengths, trace files), `costs` (iteration times and
expert traffic from kttune.cost), `engine` (the streaming event loop and the schedules), `quantiles`
(bounded-memory statistics), `metrics` (results, computed online), `simulate` (schedules side by
side, capacity), `inputs` (argument resolution for `kttune simulate`; workloads come from the one
namespace of kttune.search.workload). Pure: no torch, rich, typer or matplotlib. Memory does not
grow with the requests (engine, metrics): a run of 10 million requests stays within 2 GB
(benchmarks/bench_simulate.py --scale).

JSON schema of `SimulationReport.to_dict()` ("schema": "kttune.simulate/1"; times in the units
their names carry; NaN and infinity become null):

    schema: "kttune.simulate/1"
    model, method, profile: str
    flags: LaunchConfig.to_dict()              (the sglang-kt flags simulated)
    workload: {name, source: "preset"|"file"|"trace"|"search", form: "lengths"|"log-normal"|"trace",
               description?, mix? (log-normal: its parameters), lengths? {prompt_tokens, weights,
               output_tokens}, rate_per_s, requests, seed,
               statistics: {prompt_tokens: {mean, p50, p90, max}, output_tokens: {...},
                            requests?, mean_rate_per_s?}}
    slo: {ttft_s, tbt_ms}
    router_skew: float                         (Zipf exponent of expert popularity; 0 = uniform)
    schedule_settings: [{name, groups, large_chunk, group_tokens}]
    schedules: [                               (one per schedule, in the order asked)
      {schedule: "chunked"|"hybrid"|"layered", requests, rejected, duration_s,
       ttft_s:     {p50, p90, p99, mean, max}  (per request)
       tbt_ms:     {p50, p90, p99, mean, max}  (every inter-token gap of every request)
       max_tbt_ms: {p50, p90, p99, mean, max}  (per request, its longest gap)
       slo: {ttft_s, tbt_ms},
       attainment, ttft_attainment, tbt_attainment: share of requests (0..1) meeting both / each
       traffic_total:              {pcie_bytes, hbm_bytes, host_read_bytes}  (prefill + decode)
       traffic_prefill_per_prompt: {pcie_bytes, hbm_bytes, host_read_bytes}
       layer_loads_per_prompt: MoE-layer loads over PCIe per prompt
       gpu_busy_s, cpu_busy_s, iterations, mean_decode_batch, longest_prefill_iteration_ms,
       groups_used: {"G": stages run with G groups}   (layered)
       quantiles_exact: bool, quantile_relative_error: float  (false / 0.001 once a run has more than
                        1M requests or 2M gap values: percentiles within 0.1% of the exact ones)
       samples: null | {prompt_tokens: [..], ttft_s: [..], max_tbt_ms: [..],   (--samples; per request,
                        requests_sampled, of_requests,   a uniform sample of up to 10,000, by arrival)
                        tbt_hist_ms: {edges_ms: [61 log-spaced], counts: [60]}}  (every gap)
      }]
    capacity: [{schedule, max_rate_per_s, target_attainment, requests_per_point,
                curve: [{rate_per_s, attainment}]}]                          (--capacity)
    notes: [str]
"""
