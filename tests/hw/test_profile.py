"""The hardware profile format: lossless JSON round trips, and one-line errors for bad files."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from importlib import resources

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.errors import UserError
from kttune.hw.curve_kinds import KINDS
from kttune.hw.profile import (
    CURVE_KINDS,
    Curve,
    HardwareProfile,
    Point,
    load_profile,
    profile_from_dict,
    profile_to_dict,
    save_profile,
)
from kttune.hw.registry import load_shipped, shipped_names


def _shipped_json(name: str) -> dict:
    return json.loads((resources.files("kttune.profiles") / f"{name}.json").read_text())


@pytest.mark.parametrize("name", shipped_names())
def test_reading_a_shipped_profile_loses_nothing(name):
    # the file as JSON, against what the reader made of it written back: every key and value survives
    # (written back it opens with the envelope, kttune.schema; the shipped files predate it)
    raw = _shipped_json(name)
    back = json.loads(json.dumps(profile_to_dict(load_shipped(name))))
    assert back.pop("schema") == f"kttune.profile/{raw['version']}" and list(back)[:2] == ["format", "version"]
    assert back == {k: v for k, v in raw.items() if k != "schema"}


@pytest.mark.parametrize("name", shipped_names())
def test_save_then_load_is_the_same_profile(name, tmp_path):
    p = load_shipped(name)
    assert load_profile(save_profile(p, tmp_path / "p.json")) == p


_points = st.lists(
    st.builds(
        Point,
        x=st.floats(1, 1e12),
        t_ms=st.floats(1e-4, 1e5),
        t_ms_p10=st.floats(1e-4, 1e5),
        t_ms_p90=st.floats(1e-4, 1e5),
        n=st.integers(0, 1000),
        extra=st.dictionaries(
            st.sampled_from(["gbps", "overlap", "note"]),
            st.one_of(st.floats(0, 1e3, allow_subnormal=False), st.text(max_size=5)),
            max_size=2,
        ),
    ),
    min_size=1,
    max_size=5,
)


@st.composite
def _curve(draw):
    """A curve any probe could write: a kind of the table with its x unit and the params it must
    carry (strings for str fields, whole numbers >= 1 for the others), plus free extras."""
    kind = draw(st.sampled_from(sorted(CURVE_KINDS)))
    row = KINDS[kind]
    params = draw(
        st.dictionaries(
            st.sampled_from(["threads", "model", "gpu"]),
            st.one_of(st.integers(0, 10**5), st.text(max_size=8)),
            max_size=2,
        )
    )
    for f in fields(row.shape) if row.shape else ():
        if f.name in row.required_params or draw(st.booleans()):
            params[f.name] = draw(st.text(max_size=8) if f.type == "str" else st.integers(1, 10**5))
    return Curve(kind, row.x_unit, tuple(draw(_points)), params, backend=draw(st.text(max_size=8)))


_curves = st.lists(_curve(), max_size=4)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(curves=_curves)
def test_any_curves_round_trip(curves, tmp_path_factory):
    base = load_shipped(shipped_names()[0])
    p = replace(base, curves=tuple(curves))
    path = tmp_path_factory.mktemp("rt") / "p.json"
    assert load_profile(save_profile(p, path)) == p


def _good() -> dict:
    return _shipped_json(shipped_names()[0])


@pytest.mark.parametrize(
    "breaks, says",
    [
        (lambda d: d.update(format="something-else"), "is not a kttune hardware profile"),
        (lambda d: d.update(version=d["version"] + 1), "profile format version"),
        (lambda d: d.pop("inventory"), "malformed"),
        (lambda d: d["curves"][0].update(kind="warp_drive"), "malformed"),
        (lambda d: d["curves"][0]["points"][0].update(bogus=1), "malformed"),
        (lambda d: d["curves"][0].update(x_unit="bytes"), "its x is in tokens"),  # curves[0] is a cpu_moe curve
        (lambda d: d["curves"][0]["params"].pop("hidden"), "lack 'hidden'"),
        (lambda d: d["curves"][0]["params"].update(top_k="8"), "top_k = '8' is not a whole number"),
        (lambda d: d["curves"][0]["params"].update(experts=True), "experts = True is not a whole number"),
    ],
)
def test_a_bad_profile_is_one_user_error(breaks, says):
    d = _good()
    breaks(d)
    with pytest.raises(UserError, match=says) as e:
        profile_from_dict(d, origin="x.json")
    assert "\n" not in e.value.line() and "kttune probe" in e.value.line()


def test_missing_and_non_json_files(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_profile(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": ')
    with pytest.raises(UserError, match="not valid JSON"):
        load_profile(bad)


def test_a_failed_save_keeps_the_old_file(tmp_path):
    path = save_profile(load_shipped(shipped_names()[0]), tmp_path / "p.json")
    before = path.read_text()
    broken = replace(
        load_shipped(shipped_names()[0]), curves=(Curve("h2d", "bytes", (Point(1.0, 1.0),), params={"x": object()}),)
    )
    with pytest.raises(TypeError):
        save_profile(broken, path)
    assert path.read_text() == before
    assert [f.name for f in tmp_path.iterdir()] == ["p.json"]  # no temporary file left behind


def test_curve_queries():
    p = load_shipped("h200-pcie5-xeon-amx-16c")
    moe = p.curves_of("cpu_moe", method="RAWINT4")
    assert moe and all(c.kind == "cpu_moe" and c.params["method"] == "RAWINT4" for c in moe)
    assert p.has("cpu_moe") and not HardwareProfile(p.provenance, p.inventory, ()).has("cpu_moe")
