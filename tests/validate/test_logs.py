"""The log parser against lines in sglang-kt 0.7.2's formats (docs/validate.md quotes each format
with its source file), written here independently of the stand-in server."""

from __future__ import annotations

from kttune.validate.logs import detect_failure, parse_layerwise, parse_log, parse_startup

P = "[2026-07-15 12:00:00 TP0] "

STARTUP = [
    P
    + "Load weight end. elapsed=95.31 s, type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=96.41 GB, mem usage=42.37 GB.",
    P + "KV Cache is allocated. #tokens: 65536, KV size: 4.29 GB",
    P + "Memory pool end. avail mem=91.80 GB",
    P + "Capture cuda graph end. Time elapsed: 12.10 s. mem usage=1.25 GB. avail mem=90.55 GB.",
    P + "max_total_num_tokens=65536, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=16, "
    "context_len=262144, available_gpu_mem=90.40 GB",
    "[2026-07-15 12:00:30] The server is fired up and ready to roll!",
]


def test_startup_memory_lines():
    s = parse_startup(STARTUP)
    assert (s.weights_avail_gib, s.weights_usage_gib) == (96.41, 42.37)
    assert (s.kv_tokens, s.kv_gib) == (65536, 4.29)
    assert s.pool_end_avail_gib == 91.80
    assert (s.graph_usage_gib, s.graph_end_avail_gib) == (1.25, 90.55)
    assert (s.max_total_num_tokens, s.chunked_prefill_size, s.max_running_requests, s.context_len) == (
        65536,
        8192,
        16,
        262144,
    )
    assert s.available_gpu_mem_gib == 90.40
    assert parse_log("\n".join(STARTUP)).ready


def test_mha_kv_line_sums_k_and_v():
    s = parse_startup([P + "KV Cache is allocated. #tokens: 1000, K size: 1.50 GB, V size: 1.25 GB"])
    assert s.kv_tokens == 1000 and abs(s.kv_gib - 2.75) < 1e-12


def test_layerwise_lines_with_and_without_expert_update():
    recs = parse_layerwise(
        [
            P + "KT layerwise prefill: layer 3 prepare weight = 197.25 ms",
            P + "KT layerwise prefill: layer 3 compute = 12.50 ms",
            P + "KT layerwise prefill: layer 4 compute = 13.00 ms, expert update = 0.75 ms",
            P + "Prefill batch. #new-seq: 1, #new-token: 8192",
        ]
    )
    assert [(r.layer, r.kind, r.ms, r.expert_update_ms) for r in recs] == [
        (3, "prepare", 197.25, None),
        (3, "compute", 12.5, None),
        (4, "compute", 13.0, 0.75),
    ]


def test_cuda_oom_is_recognised_and_wins_over_the_crash_lines_around_it():
    lines = [
        P + "Scheduler hit an exception: Traceback (most recent call last):",
        '  File "kt_ep_wrapper.py", line 2694, in load',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.86 GiB. GPU 0 has a total capacity of 139.81 GiB",
        "[2026-07-15 12:01:00] Received sigquit from a child process. It usually means the child failed.",
    ]
    f = detect_failure(lines)
    assert f.kind == "oom" and f.alloc == "8.86 GiB"


def test_kv_pool_oom_at_startup():
    f = detect_failure(
        [
            P + "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: self.server_args.mem_fraction_static=0.98"
        ]
    )
    assert f.kind == "kv_oom"


def test_crash_names_the_exception_after_the_scheduler_line():
    f = detect_failure(
        [
            P + "Scheduler hit an exception: Traceback (most recent call last):",
            '  File "kt_ep_wrapper.py", line 5760, in apply',
            "AttributeError: 'AMXMoEWrapper' object has no attribute 'submit_write_weight_scale_to_buffer'",
        ]
    )
    assert f.kind == "crash" and f.message.startswith("AttributeError: 'AMXMoEWrapper'")


def test_words_containing_oom_are_not_failures():
    # kt's own tuner matched the substring "oom", which "room", "zoom" and "bloom" contain
    lines = [
        "loading bloom filter",
        "leaving room for the KV cache",
        "zoom level 2",
        P + "Prefill batch. #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.01",
        "ValueError in a user's prompt text is not a crash without SGLang's crash lines",
    ]
    assert detect_failure(lines) is None
    assert parse_log("\n".join(lines)).failure is None
