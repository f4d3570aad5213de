"""kttune.bounds: a rule accepts exactly the finite values in its range (whole where it says so),
its errors name the parameter as the caller gave it, and JSON text past its limits is one
UserError, never a RecursionError or a ValueError from int()."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune import bounds
from kttune.bounds import Bound, InvalidValue, loads_json, read_json_file
from kttune.errors import UserError

RULES = {name: rule for name, rule in vars(bounds).items() if isinstance(rule, Bound)}
# No subnormals: kt-kernel's extension, once loaded in the test process, sets flush-to-zero and
# Hypothesis then refuses to draw them.
numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False),
)


def _inside(rule: Bound, v: float) -> bool:
    lo_ok = v > rule.lo if rule.lo_open else v >= rule.lo
    hi_ok = v < rule.hi if rule.hi_open else v <= rule.hi
    return lo_ok and hi_ok


@settings(deadline=None)  # no wall-clock limit: the suite runs on shared, loaded machines
@given(name=st.sampled_from(sorted(RULES)), v=numbers)
def test_a_rule_accepts_exactly_the_finite_values_in_its_range(name, v):
    rule = RULES[name]
    ok = math.isfinite(v) and _inside(rule, v) and (not rule.integer or float(v).is_integer())
    try:
        got = rule.check(v, "--x")
    except InvalidValue as e:
        assert not ok, (name, v, e.line())
        assert e.param == "--x" and e.rule is rule and "\n" not in e.line()
        return
    assert ok, (name, v)
    assert got == v and (not rule.integer or type(got) is int)


@pytest.mark.parametrize("v", [True, False, "3", None, [1], {"a": 1}])
def test_what_is_not_a_number_is_refused(v):
    with pytest.raises(InvalidValue, match="is not a number"):
        bounds.GPUS.check(v, "--gpus")


def test_every_rule_has_a_finite_upper_bound_and_states_it():
    for name, rule in RULES.items():
        assert math.isfinite(rule.hi) and rule.hi > rule.lo, name
        assert bounds._num(rule.hi) in rule.describe(), name


def test_an_error_names_the_parameter_and_renames_to_the_flag():
    with pytest.raises(InvalidValue) as ei:
        bounds.GPUS.check(100000, "gpus")
    e = ei.value
    assert e.line().startswith("gpus 100000 is outside 1..64")
    flag = e.renamed("--gpus")
    assert flag.line().startswith("--gpus 100000 is outside 1..64") and "e.g. --gpus 2" in flag.line()
    assert (flag.value, flag.rule) == (e.value, e.rule)


def test_a_file_value_names_the_file_and_key():
    with pytest.raises(InvalidValue) as ei:
        bounds.CONFIG_SIZE.check(2048.5, "hidden_size", where="config.json of m", fix="fix config.json")
    assert ei.value.line() == "config.json of m: hidden_size = 2048.5 is not a whole number; fix config.json"


@pytest.mark.parametrize(
    "text, needle",
    [
        ('{"a": NaN}', "NaN"),
        ("[Infinity]", "Infinity"),
        ("[-Infinity]", "-Infinity"),
        ("[1e999]", "not finite"),
        ("[" + "9" * 5000 + "]", "5,000 digits"),
        ("[" + "1" * 5000 + ".5]", "characters"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper"),
        ("[" * 65 + "]" * 65, "nested deeper"),
        ('{"a": [1, 2', "not valid JSON"),
        (b"\xff\xfe", "not"),
    ],
)
def test_json_past_its_limits_is_one_line(text, needle):
    with pytest.raises(UserError) as ei:
        loads_json(text, "f.json", "pass the file kttune wrote")
    line = ei.value.line()
    assert line.startswith("f.json ") and needle in line and line.endswith("; pass the file kttune wrote")
    assert "\n" not in line


def test_json_within_the_limits_reads_as_json_does():
    doc = {"a": [1, 2.5, None, True, "x" * 100], "b": {"c": [[[[1]]]]}, "n": 10**39}
    assert loads_json(json.dumps(doc), "f", "fix") == doc
    assert loads_json("[" * 64 + "]" * 64, "f", "fix") is not None


def test_nan_reads_as_null_where_asked_and_infinity_never():
    assert loads_json('{"a": NaN}', "p", "fix", nan_as_null=True) == {"a": None}
    with pytest.raises(UserError, match="Infinity"):
        loads_json('{"a": Infinity}', "p", "fix", nan_as_null=True)


def test_a_file_too_large_is_refused_before_it_is_read(tmp_path, monkeypatch):
    f = tmp_path / "big.json"
    f.write_text("[" + "1," * 600 + "1]")
    monkeypatch.setattr(bounds, "MAX_JSON_BYTES", 1000)
    with pytest.raises(UserError, match="larger than any document"):
        read_json_file(f, "big.json", "fix")
    with pytest.raises(UserError, match="cannot read"):
        read_json_file(tmp_path / "missing.json", "missing.json", "fix")
