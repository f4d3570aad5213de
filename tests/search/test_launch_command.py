"""A launch command as the configuration sglang-kt runs (kttune.search.launch_command): SGLang's
defaults for what it leaves unset, values fitted to the profile with a note, and the commands
that cannot run as KT launches refused with the reason."""

from __future__ import annotations

import pytest

from kttune.errors import InfeasibleError, UserError
from kttune.memory.sglang_defaults import default_mem_fraction_static, profiled_kv_tokens
from kttune.search.launch_command import attention_backend_of, flag_changes, method_of, resolve_launch
from kttune.search.workload import load_workload
from kttune.spec.launch_args import parse_launch_command
from kttune.memory.vram import kv_cell_bytes, linear_state_bytes_per_request
from kttune.units import GIB
from tests.helpers import model

QWEN = model("qwen3-30b-a3b")
RAG = load_workload("rag")
BASE = "python -m sglang.launch_server --model /m --kt-weight-path /m --kt-method BF16 --kt-cpuinfer 13 "


def resolve(text: str, vram_gib: float = 80, threads=(11, 13, 15, 16), cores=16, numa=1):
    p = parse_launch_command(text)
    return resolve_launch(p, QWEN, method_of(p)[0], int(vram_gib * GIB), RAG, threads, cores, numa)


@pytest.mark.parametrize(
    "text,what",
    [
        ("python -m sglang.launch_server --model /m --kt-num-gpu-experts 4", "no --kt-weight-path"),
        (BASE, "neither --kt-num-gpu-experts nor --kt-gpu-experts-ratio"),
        (
            "python -m sglang.launch_server --model /m --kt-weight-path /w --kt-num-gpu-experts 4 "
            "--kt-gpu-prefill-token-threshold 1024",
            "crashes",
        ),  # AMXINT4 by default: no layerwise path
        (BASE + "--kt-num-gpu-experts 4 --mem-fraction-static 0.05", "Not enough memory"),
    ],
)
def test_commands_that_cannot_run_as_kt_launches_are_refused(text, what):
    with pytest.raises(InfeasibleError) as e:
        resolve(text)
    assert what in e.value.problem and e.value.fix


@pytest.mark.parametrize(
    "tail",
    [
        "--kt-num-gpu-experts 200",
        "--kt-num-gpu-experts 4 --chunked-prefill-size 0",
        "--kt-gpu-experts-ratio 1.5",
        "--kt-num-gpu-experts 4 --kv-cache-dtype int3",
        "--kt-num-gpu-experts 4 --chunked-prefill-size 1000 --page-size 64",
    ],
)
def test_impossible_values_are_bad_input(tail):
    with pytest.raises(UserError) as e:
        resolve(BASE + tail)
    assert not isinstance(e.value, InfeasibleError)


def test_unset_flags_take_sglang_defaults_and_say_so():
    r = resolve(BASE + "--kt-num-gpu-experts 4", vram_gib=80)
    c = r.cfg
    assert c.chunked_prefill_size == 8192 and c.cuda_graph_max_bs == 256 and c.threadpool_count == 2
    assert r.mem_fraction_static == default_mem_fraction_static(80 * GIB, 8192, 256, 1)
    assert c.max_total_tokens == r.profiled_kv_tokens == profiled_kv_tokens(QWEN, c, 80 * GIB, r.mem_fraction_static)
    text = "\n".join(r.notes)
    for flag in (
        "--chunked-prefill-size",
        "--cuda-graph-max-bs",
        "--mem-fraction-static",
        "--max-total-tokens",
        "--max-running-requests",
        "--kt-threadpool-count",
    ):
        assert f"{flag} unset" in text


def test_the_cap_is_the_pool_unless_the_fraction_leaves_less():
    r = resolve(BASE + "--kt-num-gpu-experts 4 --max-total-tokens 65536 --mem-fraction-static 0.9")
    assert r.cfg.max_total_tokens == 65536 and not any("more than" in n for n in r.notes)
    big = resolve(BASE + "--kt-num-gpu-experts 4 --max-total-tokens 99999999 --mem-fraction-static 0.9")
    assert big.cfg.max_total_tokens == big.profiled_kv_tokens < 99999999
    assert any("more than --mem-fraction-static 0.9 leaves" in n for n in big.notes)


def test_ratio_and_thread_counts_are_fitted_with_a_note():
    r = resolve(
        "python -m sglang.launch_server --model /m --kt-weight-path /m --kt-method BF16 --kt-cpuinfer 64 "
        "--kt-gpu-experts-ratio 0.1"
    )
    assert r.cfg.num_gpu_experts == int(128 * 48 * 0.1) // 48 == 12
    assert r.cfg.cpuinfer_threads == 15  # the most measured below 16 cores, nearest to 64
    assert any("--kt-cpuinfer 64" in n and "modelled with 15" in n for n in r.notes)
    assert any("--kt-gpu-experts-ratio 0.1" in n for n in r.notes)
    unset = resolve(
        "python -m sglang.launch_server --model /m --kt-weight-path /m --kt-method BF16 --kt-num-gpu-experts 0"
    )
    assert unset.cfg.cpuinfer_threads == 15 and any("--kt-cpuinfer unset" in n for n in unset.notes)


def test_changes_name_only_the_flags_that_differ():
    from kttune.cost.components import Components
    from kttune.search.evaluate import Budget, evaluate
    from tests.helpers import profile

    comp = Components(profile(), QWEN, "BF16")
    b = Budget(80 * GIB, 1024 * GIB)
    a = resolve(BASE + "--kt-num-gpu-experts 4 --max-total-tokens 65536 --kt-threadpool-count 1").cfg
    ev = evaluate(comp, a, RAG, b)
    assert flag_changes(ev, ev, None, 16, RAG) == ()
    from dataclasses import replace

    other = evaluate(comp, replace(a, num_gpu_experts=9, gpu_prefill_token_threshold=1024), RAG, b)
    ch = flag_changes(ev, other, 1024, 16, RAG)
    assert [c.flag for c in ch] == ["--kt-num-gpu-experts", "--kt-gpu-prefill-token-threshold"]
    assert ch[0].yours == "4" and ch[0].kttune == "9" and "cross at 1,024" in ch[1].why


NEXT = model("qwen3-next-80b-a3b")
NEXT_BASE = BASE + "--kt-num-gpu-experts 8 --mem-fraction-static 0.9 --max-running-requests 8 "


def resolve_next(tail: str = ""):
    p = parse_launch_command(NEXT_BASE + tail)
    return resolve_launch(p, NEXT, "BF16", 80 * GIB, RAG, (11, 13, 15, 16), 16, 1)


def test_linear_attention_states_take_their_slots_from_the_kv_pool():
    """docs/memory.md#linear-attention-state: unset, SGLang gives the states a share of the room
    after the weights; given, exactly the slots; either way the KV pool sizes from what is left."""
    unset = resolve_next()
    per = linear_state_bytes_per_request(NEXT, 1)
    assert unset.cfg.linear_state_slots > 0
    assert any("--max-mamba-cache-size unset" in n and "0.9 / 1.9" in n for n in unset.notes)
    given = resolve_next("--max-mamba-cache-size 24")
    assert given.cfg.linear_state_slots == 24
    freed = (unset.cfg.linear_state_slots - 24) * per
    assert given.profiled_kv_tokens - unset.profiled_kv_tokens == pytest.approx(freed / kv_cell_bytes(NEXT, 1), abs=1)
    no_radix = resolve_next("--disable-radix-cache")
    assert no_radix.cfg.linear_state_slots == 8  # one per running request
    ratio = resolve_next("--mamba-full-memory-ratio 0.3")
    assert ratio.cfg.linear_state_slots < unset.cfg.linear_state_slots


def test_too_few_state_slots_cap_the_running_requests():
    r = resolve_next("--max-mamba-cache-size 12")
    assert r.cfg.max_running_requests == 4  # 3 slots per request with the radix cache on
    assert any("runs at most 4 at once" in n for n in r.notes)
    assert resolve_next("--max-mamba-cache-size 12 --disable-radix-cache").cfg.max_running_requests == 8
    with pytest.raises(InfeasibleError) as e:
        resolve_next("--max-mamba-cache-size 2")
    assert "run no request" in e.value.problem and "--max-mamba-cache-size 3" in e.value.fix
    with pytest.raises(UserError):
        resolve_next("--max-mamba-cache-size 0")
    with pytest.raises(InfeasibleError) as e:  # the ratio's share of the room after the weights holds no state
        resolve_next("--mamba-full-memory-ratio 0.0001")
    assert "no linear-attention request state" in e.value.problem


def test_state_flags_on_a_model_without_linear_layers_change_nothing_and_say_so():
    r = resolve(BASE + "--kt-num-gpu-experts 4 --max-mamba-cache-size 24 --disable-radix-cache")
    assert r.cfg.linear_state_slots == 0
    assert any("--max-mamba-cache-size: qwen3-30b-a3b has no linear-attention layers" in n for n in r.notes)
    assert any("--disable-radix-cache: no prefix reuse" in n for n in r.notes)


def test_sparse_attention_models_run_on_pages_of_64():
    glm5 = model("glm-5")
    p = parse_launch_command(
        "python -m sglang.launch_server --model /m --kt-weight-path /m --kt-method BF16 --kt-cpuinfer 13 "
        "--kt-num-gpu-experts 0 --page-size 1 --mem-fraction-static 0.9"
    )
    r = resolve_launch(p, glm5, "BF16", 141 * GIB, RAG, (11, 13, 15, 16), 16, 1)
    assert r.cfg.page_size == 64 and r.profiled_kv_tokens % 64 == 0
    assert any("--page-size 1: SGLang sets 64" in n for n in r.notes)


@pytest.mark.parametrize(
    "flag,backend,note",
    [("", "nsa", "unset: SGLang runs glm-5 on its nsa backend"), ("--attention-backend nsa", "nsa", None)]
    + [(f"--attention-backend {b}", b, "skips glm-5's sparse-attention indexer") for b in ("triton", "flashinfer")],
)
def test_the_backend_decides_whether_a_sparse_attention_model_runs_its_indexer(flag, backend, note):
    """SGLang picks nsa for a sparse-attention model when the flag is unset, and only nsa runs the
    indexer (docs/cost-model.md#sparse-attention): the backend the cost model runs the command on,
    with the note that says which attention it models."""
    cmd = BASE + "--kt-num-gpu-experts 0 --max-total-tokens 20000 " + flag
    got, said = attention_backend_of(parse_launch_command(cmd), model("glm-5"))
    assert got == backend and (said is None if note is None else note in said)
    r = resolve_launch(parse_launch_command(cmd), model("glm-5"), "BF16", 141 * GIB, RAG, (11, 13, 15, 16), 16, 1)
    assert (note is None and not any("--attention-backend" in n for n in r.notes)) or any(note in n for n in r.notes)
    # a GQA model: the flag as given, and that it changes nothing kttune predicts
    got, said = attention_backend_of(parse_launch_command(cmd), QWEN)
    assert got == (backend if flag else "") and (said is None if not flag else "whatever the backend" in said)


def test_an_mla_command_without_a_backend_runs_on_sglang_s_pick():
    cmd = BASE + "--kt-num-gpu-experts 0 --max-total-tokens 20000 "
    backend, note = attention_backend_of(parse_launch_command(cmd), model("deepseek-v3"))
    assert backend == "auto" and "fa3" in note and "latent form" in note
    given = attention_backend_of(parse_launch_command(cmd + "--attention-backend triton"), model("deepseek-v3"))
    assert given == ("triton", None)


def test_an_mla_command_without_a_cap_overcommits_and_says_so():
    """sglang-kt 0.7.2 sizes an MLA pool by its profiling cell (3x short for DeepSeek-V3): without
    --max-total-tokens the pool takes about 3x the room the fraction leaves, which the note names
    with the cap that fits; with that cap, no note."""
    v3 = model("deepseek-v3")
    cmd = (
        "python -m sglang.launch_server --model /m --kt-weight-path /m --kt-method FP8 --kt-cpuinfer 13 "
        "--kt-num-gpu-experts 2 --mem-fraction-static 0.9 "
    )
    p = parse_launch_command(cmd)
    r = resolve_launch(p, v3, "FP8", 141 * GIB, RAG, (11, 13, 15, 16), 16, 1)
    (note,) = [n for n in r.notes if "sizes the MLA KV pool" in n]
    fits = int(note.split("--max-total-tokens ")[1].split(" or less")[0].replace(",", ""))
    assert r.cfg.max_total_tokens == pytest.approx(3 * fits, rel=0.01)
    capped = resolve_launch(
        parse_launch_command(cmd + f"--max-total-tokens {fits}"), v3, "FP8", 141 * GIB, RAG, (11, 13, 15, 16), 16, 1
    )
    assert capped.cfg.max_total_tokens == fits and not any("sizes the MLA KV pool" in n for n in capped.notes)


V4 = "python -m sglang.launch_server --model /m --kt-weight-path /m --kt-method MXFP4 --kt-cpuinfer 13 "


def _v4(extra: str, vram_gib: float = 48):
    p = parse_launch_command(V4 + extra)
    return resolve_launch(p, model("deepseek-v4-flash"), "MXFP4", int(vram_gib * GIB), RAG, (11, 13, 15, 16), 16, 1)


def test_deepseek_v4_runs_as_sglang_forces_it():
    """Page 256, an fp8 cache (another dtype stops SGLang at start), 256 requests when unset, and its
    compressed backend whatever --attention-backend says (docs/deepseek-v4.md)."""
    r = _v4("--kt-num-gpu-experts 4 --mem-fraction-static 0.8 --page-size 64 --attention-backend flashinfer")
    assert r.cfg.page_size == 256 and r.cfg.kv_cache_dtype_bytes == 1 and r.cfg.max_running_requests == 256
    assert any("compressed backend" in n for n in r.notes) and any("--page-size 64" in n for n in r.notes)
    with pytest.raises(UserError, match="fp8_e4m3 only"):
        _v4("--kt-num-gpu-experts 4 --kv-cache-dtype bf16")


def test_deepseek_v4s_pool_is_capped_by_sglangs_first_sizing():
    """With --max-total-tokens, SGLang caps DeepSeek-V4's pool at the tokens its first sizing's cell
    (30,444 bytes for Flash) finds room for; without it, its calculator fills the room at 15,956 a token."""
    fraction = "--kt-num-gpu-experts 4 --mem-fraction-static 0.6 --chunked-prefill-size 4096 "
    unset = _v4(fraction)
    capped = _v4(fraction + "--max-total-tokens 4000000")
    assert unset.cfg.max_total_tokens > 1.8 * capped.cfg.max_total_tokens
    assert capped.cfg.max_total_tokens == capped.profiled_kv_tokens
    assert any("caps the pool" in n for n in capped.notes)
    small = _v4(fraction + "--max-total-tokens 65536")
    assert small.cfg.max_total_tokens == 65536 and any("SWA share to 0.13" in n for n in small.notes)
