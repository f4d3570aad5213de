"""The resolve layer: the command line's words to the facade's typed values, and its errors named
as the caller spells the parameter."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kttune.app import resolve
from kttune.errors import ParameterError, UserError
from kttune.search.space import CHUNK_PAGE
from kttune.units import GIB


def test_chunks_accept_k_and_sort():
    assert resolve.chunks("65536, 8k,8192") == (8192, 65536)
    assert resolve.chunks(None) == ()


@pytest.mark.parametrize("bad", ["", "abc", "1000", "-64", "0", "8k,x"])
def test_chunks_refuse_with_one_line_naming_the_parameter(bad):
    with pytest.raises(ParameterError) as e:
        resolve.chunks(bad)
    assert "\n" not in str(e.value) and e.value.param == "chunks"
    assert e.value.named({"chunks": "--chunks"}.get).line().startswith("--chunks ")


@given(n=st.integers(1, 1024))  # up to 1 Mi tokens, the bound of a forward
def test_chunks_are_the_multiples_of_the_page(n):
    assert resolve.chunks(f"{n * CHUNK_PAGE}") == (n * CHUNK_PAGE,)
    assert resolve.chunks(f"{n}k") == (n * 1024,)


def test_sizes_and_durations():
    assert resolve.vram_bytes("32G") == resolve.vram_bytes("32GiB") == 32 * GIB
    assert resolve.host_ram_bytes(None) is None and resolve.host_ram_bytes("1T") == 1024 * GIB
    assert resolve.seconds("1h30m", "--budget") == 5400 and resolve.seconds(None, "--budget") is None
    assert (
        resolve.milliseconds("150ms", "--tbt-slo") == pytest.approx(150)
        and resolve.milliseconds("0.2s", "--tbt-slo") == 200
    )


def test_a_size_past_any_gpu_names_the_value_as_written():
    with pytest.raises(ParameterError) as e:
        resolve.vram_bytes("9999T")
    line = e.value.named({"vram_bytes": "--vram", "gpus": "--gpus"}.get).line()
    assert line.startswith("--vram 9999T is ") and "--gpus" in line


def test_lists_of_tokens_and_words():
    from kttune import bounds

    assert resolve.token_list(["1024,2048", "4096"], "--prompts", bounds.FORWARD_TOKENS) == (1024, 2048, 4096)
    with pytest.raises(UserError):
        resolve.token_list(["x"], "--prompts", bounds.FORWARD_TOKENS)
    assert resolve.words(["hybrid, layerwise", ""]) == ("hybrid", "layerwise")
