from __future__ import annotations

from hypothesis import given, strategies as st

from kttune.units import GIB
from kttune.validate.plan import prompt_lengths, prompt_token_ids, readiness_timeout_s, server_argv
from tests.helpers import cfg


@given(
    st.lists(st.integers(1, 300_000), min_size=1, max_size=12),
    st.sampled_from([1024, 2048, 4096, 8192, 16384]),
    st.integers(2048, 262_144),
)
def test_first_prompt_is_exactly_the_chunk_and_every_length_fits(lengths, chunk, ctx):
    out = prompt_lengths(tuple(lengths), cfg("RAWINT4", chunked_prefill_size=chunk), ctx)
    assert out[0] == min(chunk, ctx - 2)
    assert all(1 <= x <= ctx - 2 for x in out)
    assert len(set(out)) == len(out)
    assert set(out[1:]) | {out[0]} >= {min(x, ctx - 2) for x in lengths}


def test_timeout_grows_with_the_weights():
    assert readiness_timeout_s(0) == 120.0
    assert readiness_timeout_s(600 * GIB) == 720.0


def test_prompts_do_not_share_a_prefix():
    a, b = prompt_token_ids(64, 160_000, 1), prompt_token_ids(64, 160_000, 2)
    assert a[:4] != b[:4] and all(1000 <= t < 100_000 for t in a + b)


def test_server_argv_replaces_interpreter_module_port_and_host():
    argv = server_argv(
        ["python", "-m", "sglang.launch_server", "--model", "/m", "--port", "30000"], "/py", "x.y", "127.0.0.1", 4242
    )
    assert argv == ["/py", "-m", "x.y", "--model", "/m", "--port", "4242", "--host", "127.0.0.1"]
