import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kttune.cost.fit import fit_nonneg, interp_loglog


@settings(max_examples=30, deadline=None)
@given(a=st.floats(0.001, 10), b=st.floats(1e-9, 1e-3))
def test_fit_recovers_overhead_and_slope(a, b):
    xs = [2**i for i in range(20, 31, 2)]
    f = fit_nonneg(["c", "x"], [[1, x] for x in xs], [a + b * x for x in xs])
    assert f.coef[0] == pytest.approx(a, rel=1e-5)
    assert f.coef[1] == pytest.approx(b, rel=1e-5)


def test_fit_never_returns_negative_coefficients():
    xs = [1, 2, 4, 8, 16]
    ys = [10.0, 9.0, 8.5, 8.0, 7.9]  # falls with x: an unconstrained fit would give a negative slope
    f = fit_nonneg(["c", "x"], [[1, x] for x in xs], ys)
    assert all(c >= 0 for c in f.coef)


def test_interp_loglog_is_exact_on_power_laws_and_linear_past_the_end():
    xs = [1, 10, 100]
    ys = [2, 20, 200]
    assert interp_loglog(xs, ys, 31.6) == pytest.approx(63.2, rel=1e-6)
    assert interp_loglog(xs, ys, 1000) == pytest.approx(2000)
    assert interp_loglog(xs, ys, 0.1) == 2
