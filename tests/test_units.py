"""Size parsing: every spelling the help text promises, and one-line errors for the rest."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kttune.errors import UserError
from kttune.units import GB, GIB, MIB, parse_size_bytes


def test_the_constants():
    assert (GIB, MIB, GB) == (2**30, 2**20, 10**9)


@given(n=st.integers(1, 4096), unit=st.sampled_from(["", "G", "g", "GB", "GiB", "gib", " G"]))
def test_gigabyte_spellings_all_mean_gib(n, unit):
    # nvidia-smi and SGLang's logs write GiB as "GB"; a bare number is GiB (`--vram 24`)
    assert parse_size_bytes(f"{n}{unit}") == n * GIB


@given(n=st.integers(1, 10**6))
def test_mebibytes_and_kibibytes(n):
    assert parse_size_bytes(f"{n}M") == n * MIB == parse_size_bytes(f"{n}MiB")
    assert parse_size_bytes(f"{n}K") == n * 1024


def test_fractions_and_terabytes():
    assert parse_size_bytes("1.5G") == 3 * GIB // 2
    assert parse_size_bytes("2T") == 2 * 1024 * GIB


@pytest.mark.parametrize("text", ["", "G", "12 parsecs", "-3G", "1e3G", "0", "0.0G", "twelve"])
def test_bad_sizes_are_one_line_errors(text):
    with pytest.raises(UserError) as e:
        parse_size_bytes(text, "--host-ram")
    assert "--host-ram" in e.value.line() and "\n" not in e.value.line()
