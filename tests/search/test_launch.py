from kttune.search.launch import default_paths, launch_argv
from kttune.emit.launch import launch_command
from kttune.memory.vram import vram_breakdown
from kttune.units import GIB
from tests.helpers import cfg, model


def argv_for(name, method, **kw):
    m = model(name)
    c = cfg(method, **kw)
    return launch_argv(m, c, vram_breakdown(m, c), 80 * GIB, default_paths(m, method, None, None))


def test_native_methods_read_experts_from_the_model_dir():
    a = argv_for("kimi-k2-thinking", "RAWINT4", gpu_prefill_token_threshold=4096)
    assert a[a.index("--kt-weight-path") + 1] == a[a.index("--model") + 1] == "/path/to/Kimi-K2-Thinking"
    assert a[a.index("--kt-gpu-prefill-token-threshold") + 1] == "4096"


def test_amx_gets_converted_weights_and_no_threshold():
    a = argv_for("deepseek-v3", "AMXINT4", gpu_prefill_token_threshold=4096)
    assert a[a.index("--kt-gpu-prefill-token-threshold") + 1] == "0"
    assert a[a.index("--kt-weight-path") + 1] != a[a.index("--model") + 1]


def test_fp8_adds_the_triton_gemm_backend_and_mla_uses_triton_attention():
    a = argv_for("deepseek-v3", "FP8")
    assert a[a.index("--fp8-gemm-backend") + 1] == "triton"
    assert a[a.index("--attention-backend") + 1] == "triton"
    assert "--fp8-gemm-backend" not in argv_for("qwen3-30b-a3b", "BF16")


def test_command_text_is_shell_ready():
    text = launch_command(argv_for("qwen3-30b-a3b", "BF16", num_gpu_experts=4))
    assert text.startswith("PYTORCH_ALLOC_CONF=expandable_segments:True")
    assert "--kt-num-gpu-experts 4 \\" in text


def test_multiline_command_is_the_same_command_in_80_columns():
    import shlex

    argv = argv_for("kimi-k2-thinking", "RAWINT4", num_gpu_experts=43)
    text = launch_command(argv)
    assert all(len(line) <= 80 for line in text.splitlines())
    # backslash-newline continues the line: the shell reads exactly the one-line command
    assert shlex.split(text.replace("\\\n", " ")) == shlex.split(launch_command(argv, multiline=False))


def test_linear_attention_models_get_their_state_slots_and_read_them_back():
    """The emitted --max-mamba-cache-size (3 states per running request) is what the VRAM breakdown
    counted, and `kttune explain -- COMMAND` reads the same slots back; no other model gets the flag."""
    from kttune.search.launch_command import resolve_launch
    from kttune.search.workload import load_workload
    from kttune.spec.launch_args import parse_launch_command

    a = argv_for("qwen3-next-80b-a3b", "BF16", max_running_requests=6)
    assert a[a.index("--max-mamba-cache-size") + 1] == "18"
    nxt = model("qwen3-next-80b-a3b")
    r = resolve_launch(parse_launch_command(a), nxt, "BF16", 80 * GIB, load_workload("rag"), (15,), 16, 1)
    assert r.cfg.linear_state_slots == 18 and r.cfg.max_running_requests == 6
    assert "--max-mamba-cache-size" not in argv_for("qwen3-30b-a3b", "BF16")


def test_sparse_attention_models_launch_with_the_bf16_kv_they_are_sized_for():
    a = argv_for("glm-5", "BF16")
    assert a[a.index("--kv-cache-dtype") + 1] == "bfloat16"
    assert "--kv-cache-dtype" not in argv_for("deepseek-v3", "FP8")
