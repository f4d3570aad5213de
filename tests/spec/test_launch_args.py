"""The launch-flag table and the parser of a user's sglang-kt launch command: every spelling
sglang-kt 0.7.2 accepts reads to the same value, the command kttune emits reads back to the
configuration it was written from (the emitter and the parser share the table), and what the
parser does not model is said, flag by flag."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.config import LaunchConfig
from kttune.search.launch import LaunchPaths, launch_argv
from kttune.emit.launch import launch_command
from kttune.errors import UserError
from kttune.memory.vram import vram_breakdown
from kttune.spec.launch_args import FLAG, FLAGS, IGNORED, flag_name, parse_launch_command
from kttune.units import GIB
from tests.helpers import model

DOC_COMMAND = (Path(__file__).resolve().parents[1] / "fixtures" / "kt-layerwise-doc-launch.sh").read_text()


def test_the_kt_doc_example_reads_whole():
    """The launch example of KTransformers' layerwise-prefill document (copied into our fixture)."""
    p = parse_launch_command(DOC_COMMAND)
    assert dict(p.values) == {
        "model_path": "/path/to/model",
        "trust_remote_code": True,
        "method": "FP8",
        "weight_path": "/path/to/model",
        "cpuinfer_threads": 64,
        "threadpool_count": 2,
        "num_gpu_experts": 32,
        "chunked_prefill_size": 16384,
        "gpu_prefill_token_threshold": 2048,
    }
    assert p.unknown == ()
    assert [f for f, _ in p.ignored] == ["--trust-remote-code"]


CONFIGS = st.builds(
    LaunchConfig,
    method=st.sampled_from(["BF16", "FP8", "RAWINT4", "AMXINT4"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    num_gpu_experts=st.integers(0, 128),
    chunked_prefill_size=st.integers(1, 2048).map(lambda k: 64 * k),
    gpu_prefill_token_threshold=st.integers(0, 65536),
    max_total_tokens=st.integers(1024, 2**20),
    cpuinfer_threads=st.integers(1, 256),
    threadpool_count=st.integers(1, 8),
    max_running_requests=st.integers(1, 512),
    cuda_graph_max_bs=st.integers(1, 512),
)


@settings(max_examples=60, deadline=None)
@given(CONFIGS, st.sampled_from(["/m/Qwen3-30B-A3B", "/data/my models/k2"]), st.booleans())
def test_the_emitted_command_reads_back_to_its_configuration(cfg, path, as_text):
    m = model("qwen3-30b-a3b")
    argv = launch_argv(m, cfg, vram_breakdown(m, cfg), 80 * GIB, LaunchPaths(path, path + "-cpu"))
    p = parse_launch_command(
        launch_command(argv) if as_text else argv
    )  # the printed block, env and line breaks included
    assert p.unknown == ()
    for key in (
        "num_gpu_experts",
        "chunked_prefill_size",
        "max_total_tokens",
        "cpuinfer_threads",
        "threadpool_count",
        "max_running_requests",
        "cuda_graph_max_bs",
        "tp",
    ):
        assert p.get(key) == getattr(cfg, key), key
    assert p.get("method") == cfg.method and p.get("model_path") == path and p.get("weight_path") == path + "-cpu"
    layerwise = cfg.method != "AMXINT4"
    assert p.get("gpu_prefill_token_threshold") == (cfg.gpu_prefill_token_threshold if layerwise else 0)
    if as_text:
        assert p.env == ("PYTORCH_ALLOC_CONF=expandable_segments:True", "SGLANG_ENABLE_JIT_DEEPGEMM=0")


def test_the_emitter_writes_only_names_of_the_table():
    m = model("kimi-k2-thinking")
    cfg = LaunchConfig("RAWINT4", 1, 8, 8192, 2048, 65536, 13)
    argv = launch_argv(m, cfg, vram_breakdown(m, cfg), 140 * GIB, LaunchPaths("/m", "/m"))
    names = {n for f in FLAGS for n in f.names}
    assert {w for w in argv if w.startswith("--")} <= names
    assert {
        flag_name(k)
        for k in (
            "num_gpu_experts",
            "gpu_prefill_token_threshold",
            "chunked_prefill_size",
            "max_total_tokens",
            "weight_path",
            "cpuinfer_threads",
            "threadpool_count",
            "method",
        )
    } <= set(argv)


@pytest.mark.parametrize("flag", FLAGS, ids=lambda f: f.key)
def test_every_spelling_and_both_forms_read_the_same(flag):
    value = {int: "7", float: "0.5", str: "x", list: "7"}.get(flag.kind)
    want = {bool: True, list: (7,)}.get(flag.kind) or (flag.kind(value) if value is not None else None)
    for name in flag.names:
        words = [name] if flag.kind is bool else [name, value]
        p = parse_launch_command(["python3", "-m", "sglang.launch_server", *words])
        q = parse_launch_command(f"sglang.launch_server {name}" + ("" if flag.kind is bool else f"={value}"))
        assert p.values == q.values and p.get(flag.key) == want


def test_a_list_flag_takes_every_word_up_to_the_next_flag():
    p = parse_launch_command("python -m sglang.launch_server --kt-numa-nodes 0 1 --kt-threadpool-count 2")
    assert p.get("numa_nodes") == (0, 1) and p.get("threadpool_count") == 2


def test_ignored_flags_have_a_note_and_keep_their_value_out_of_the_rest():
    p = parse_launch_command(
        "python -m sglang.launch_server --host 0.0.0.0 --kt-enable-dynamic-expert-update "
        "--kt-num-gpu-experts 4 --kt-max-deferred-experts-per-token 2 --my-flag 3 --other-switch "
        "--chunked-prefill-size 4096"
    )
    assert p.get("num_gpu_experts") == 4 and p.get("chunked_prefill_size") == 4096
    assert [f for f, _ in p.ignored] == [
        "--host",
        "--kt-enable-dynamic-expert-update",
        "--kt-max-deferred-experts-per-token",
    ]
    assert p.unknown == ("--my-flag", "--other-switch")
    assert all(note for _, _, note in IGNORED)
    assert len(p.notes()) == 4 and "--my-flag" in p.notes()[-1]


def test_the_last_value_wins_as_in_argparse():
    assert parse_launch_command(["--kt-num-gpu-experts", "4", "--kt-num-gpu-experts=9"]).get("num_gpu_experts") == 9


@pytest.mark.parametrize(
    "bad,what",
    [
        ("python -m sglang.launch_server --kt-num-gpu-experts", "has no value"),
        ("python -m sglang.launch_server --kt-num-gpu-experts four", "not a whole number"),
        ("python -m sglang.launch_server --mem-fraction-static high", "not a number"),
        ("python -m vllm.entrypoints.api_server --model x", "not an sglang launch command"),
        ("kt run kimi", "not an sglang launch command"),
        ("python -m sglang.launch_server --model 'unclosed", "cannot read the launch command"),
        ("python -m sglang.launch_server --enable-mixed-chunk=1", "takes no value"),
    ],
)
def test_bad_commands_are_one_line_errors(bad, what):
    with pytest.raises(UserError) as e:
        parse_launch_command(bad)
    assert what in e.value.problem and e.value.fix


def test_the_flag_table_is_one_place():
    names = [n for f in FLAGS for n in f.names]
    assert len(names) == len(set(names))  # a spelling means one flag
    assert not set(names) & {n for ns, _, _ in IGNORED for n in ns}
    assert FLAG["tp"].names[0] == "--tensor-parallel-size" and "--tp-size" in FLAG["tp"].names
