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


# ---- times_faster: one wording for every "Nx faster / slower" -------------------------------------

import re  # noqa: E402

from kttune.units import times_faster  # noqa: E402

_RATIO = re.compile(r"^(\d+(?:\.\d)?)x (faster|slower)$")
positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(positive, positive)
def test_the_factor_is_at_least_one_and_swapping_flips_the_word(a, b):
    one, other = times_faster(a, b, lower_is_faster=True), times_faster(b, a, lower_is_faster=True)
    if one == "the same":
        assert other == "the same" and max(a / b, b / a) < 1.05 + 1e-9
        return
    m, n = _RATIO.match(one), _RATIO.match(other)
    assert m and n and m.group(1) == n.group(1) and {m.group(2), n.group(2)} == {"faster", "slower"}
    factor = max(a / b, b / a)
    assert float(m.group(1)) >= 1.0
    assert abs(float(m.group(1)) - factor) <= (0.5 if factor >= 10 else 0.05) + 1e-9
    # a shorter time is faster
    assert (m.group(2) == "faster") == (a < b)


@given(positive, positive)
def test_a_rate_reads_the_other_way_round_from_a_time(a, b):
    assert times_faster(a, b, lower_is_faster=False) == times_faster(b, a, lower_is_faster=True)


def test_the_examples():
    assert times_faster(2.0, 1.0, lower_is_faster=True) == "2.0x slower"  # twice the time: never "0.5x faster"
    assert times_faster(1.0, 1.3, lower_is_faster=True) == "1.3x faster"
    assert times_faster(54.2, 33.1, lower_is_faster=False) == "1.6x faster"
    assert times_faster(1.0, 1.02, lower_is_faster=True) == "the same"
    assert times_faster(1.0, 43.0, lower_is_faster=True) == "43x faster"
    with pytest.raises(ValueError):
        times_faster(0.0, 1.0, lower_is_faster=True)
