"""The 80-column law and the helpers that keep tables within it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.table import Table

from kttune.emit.terminal import fits, first_that_fits, ms_or_s, ms_short, rendered_lines, split_columns, tokens_short


def table(cells: list[str], no_wrap: bool = False) -> Table:
    t = Table(title="t")
    for i in range(len(cells)):
        t.add_column(f"c{i}", no_wrap=no_wrap)
    t.add_row(*cells)
    return t


def test_a_wrapped_or_cut_cell_breaks_the_law():
    long = "word " * 12
    assert fits(table([long, "x"]), 200)
    assert not fits(table([long, "x"]), 40)  # wrapped into more lines
    assert len(rendered_lines(table([long, "x"]), 40)) > len(rendered_lines(table([long, "x"]), 200))
    assert not fits(table(["y" * 60, "x"], no_wrap=True), 40)  # cut with an ellipsis, same line count
    assert fits(table(["two\nlines", "x"]), 40)  # a designed line break is not wrapping


def test_first_that_fits_takes_the_compact_form_only_when_needed():
    full = lambda: table(["a" * 30, "b" * 30, "c" * 30])  # noqa: E731
    compact = lambda: table(["a" * 10, "b" * 10])  # noqa: E731
    assert first_that_fits(200, full, compact).columns.__len__() == 3
    assert first_that_fits(80, full, compact).columns.__len__() == 2


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 14), min_size=1, max_size=25), st.integers(40, 120))
def test_split_columns_fits_and_keeps_every_column_in_order(widths, width):
    def build(idx):
        t = Table(title="pivot")
        t.add_column("method", no_wrap=True)
        for i in idx:
            t.add_column(f"{i}", no_wrap=True, justify="right")
        t.add_row("RAWINT4", *["9" * widths[i] for i in idx])
        return t

    parts = split_columns(width, 1, build, range(len(widths)))
    headers = [c.header for p in parts for c in p.columns[1:]]
    assert headers == [str(i) for i in range(len(widths))]
    for p in parts:
        assert fits(p, width) or len(p.columns) == 2  # one varying column is the least a part holds


@given(st.floats(0.0, 1e8, allow_nan=False, allow_subnormal=False))  # kt-kernel, once loaded, flushes subnormals
def test_ms_short_is_short(v):
    assert len(ms_short(v)) <= 8


@given(st.floats(0.0, 1e8, allow_nan=False, allow_subnormal=False))
def test_ms_or_s_reads_back(v):
    """Milliseconds to 0.1 below a second, seconds to 0.01 from there: the text reads back to within
    half its last digit, and a second is never written as 1000 ms."""
    number, unit = ms_or_s(v).split()
    got, step = (float(number), 0.1) if unit == "ms" else (float(number) * 1e3, 10.0)
    assert abs(got - v) <= step / 2 + 1e-9 * v
    assert (unit == "ms") == (got < 1000)


def test_ms_or_s_none_and_the_reports_that_use_it():
    from kttune.emit import report, validate_report

    assert ms_or_s(None) == "-" and ms_or_s(87.46) == "87.5 ms" and ms_or_s(12345) == "12.35 s"
    assert ms_or_s(999.97) == "1.00 s"  # not "1000.0 ms"
    assert report.ms_or_s is ms_or_s and validate_report.ms_or_s is ms_or_s  # one format, no local copies


@given(st.integers(1, 4 * 10**6))
def test_tokens_short_reads_back(n):
    s = tokens_short(n)
    assert len(s) <= 9
    back = int(s[:-1]) * 1024 if s.endswith("K") else int(s.replace(",", ""))
    assert back == n
