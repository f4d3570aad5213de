"""Tables that fit the terminal: a table is shown in its full form when that fits the console's
width without wrapping or truncating a cell, else in a compact form built for narrow terminals
(80 columns), else split into several tables of fewer columns.

The law `fits` checks, and the tests hold every report table to at 80 columns: rendered at the
width, a table has exactly as many lines as rendered at unlimited width (no cell wrapped), no line
is wider than the width, and no cell is cut with an ellipsis.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

UNLIMITED = 10_000
ELLIPSIS = "\u2026"


def rendered_lines(renderable: Any, width: int) -> list[str]:
    """The plain text lines `renderable` renders to on a console `width` cells wide."""
    from rich.console import Console

    c = Console(
        width=width,
        record=True,
        file=_Null(),
        color_system=None,
        force_terminal=False,
        legacy_windows=False,
        soft_wrap=False,
    )
    c.print(renderable)
    return [ln.rstrip() for ln in c.export_text(styles=False).rstrip("\n").split("\n")]


class _Null:
    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def fits(renderable: Any, width: int) -> bool:
    """True when `renderable` shows at `width` exactly as at unlimited width, line for line (no cell
    wrapped into more lines, none cut with an ellipsis), no line exceeds `width` cells, and a
    table's title and caption keep their lines (rich wraps them to the table's own width)."""
    from rich.cells import cell_len

    narrow = rendered_lines(renderable, width)
    wide = rendered_lines(renderable, UNLIMITED)
    if not (
        len(narrow) == len(wide)
        and all(cell_len(ln) <= width for ln in narrow)
        and sum(ln.count(ELLIPSIS) for ln in narrow) == sum(ln.count(ELLIPSIS) for ln in wide)
    ):
        return False
    for text in (getattr(renderable, "title", None), getattr(renderable, "caption", None)):
        for part in _plain(text).split("\n") if isinstance(text, str) else ():
            if part.strip() and not any(part.strip() in ln for ln in narrow):
                return False
    return True


def _plain(markup: str) -> str:
    from rich.text import Text

    return Text.from_markup(markup).plain.strip()


def keep_title(table: Any) -> Any:
    """Make a table at least as wide as its title and caption, so rich does not wrap them."""
    from rich.cells import cell_len

    need = max(
        [
            cell_len(part)
            for x in (table.title, table.caption)
            if isinstance(x, str) and x
            for part in _plain(x).split("\n")
        ]
        or [0]
    )
    table.min_width = max(table.min_width or 0, need)
    return table


def tight_table(title: str | None = None, caption: str | None = None) -> Any:
    """The frame of the narrowest forms (60 columns): a rule under the header, one space between
    columns, no edge, no padding."""
    from rich import box
    from rich.table import Table

    return Table(title=title, caption=caption, box=box.SIMPLE_HEAD, padding=(0, 0), show_edge=False)


def first_that_fits(width: int, *forms: Callable[[], Any]) -> Any:
    """The first of the table forms (builders, widest first) that fits `width`; the last otherwise."""
    built = None
    for make in forms:
        built = make()
        if fits(built, width):
            return built
    return built


def split_columns(width: int, fixed: int, build: Callable[[Sequence[int]], Any], varying: Sequence[int]) -> list[Any]:
    """Split a wide pivot table into several that fit `width`: `build(indices)` makes a table with
    the `fixed` leading columns and the varying columns at `indices`; each table takes as many
    consecutive varying columns as fit (at least one)."""
    out, start = [], 0
    idx = list(varying)
    while start < len(idx):
        end = start + 1
        while end < len(idx) and fits(build(idx[start : end + 1]), width):
            end += 1
        out.append(build(idx[start:end]))
        start = end
    return out


# ---- compact number formats ------------------------------------------------------------------------


def ms_or_s(v: float | None) -> str:
    """A duration for reports with room: below a second in ms to 0.1 ms ("87.5 ms"), from a
    second on in s to 10 ms ("12.35 s"); None -> "-"."""
    if v is None:
        return "-"
    return f"{v / 1e3:.2f} s" if round(v, 1) >= 1000 else f"{v:.1f} ms"  # 999.97 ms reads "1.00 s"


def ms_short(v: float | None) -> str:
    """A duration in at most 8 cells: 0.123 ms, 12.3 ms, 123 ms, 1.23 s, 12.3 s, 123 s, 12.3 min, 1.5 h."""
    if v is None:
        return "-"
    if v < 1:
        return f"{v:.3f} ms"
    if v < 100:
        return f"{v:.1f} ms"
    if v < 1000:
        return f"{v:.0f} ms"
    s = v / 1e3
    if s < 10:
        return f"{s:.2f} s"
    if s < 600:
        return f"{s:.1f} s" if s < 100 else f"{s:.0f} s"
    m = s / 60
    if round(m, 1) < 100:
        return f"{m:.1f} min"
    return f"{m:.0f} min" if m < 600 else f"{m / 60:.1f} h"


def tokens_short(n: int) -> str:
    """A token count in few cells: multiples of 1024 from 2K up as "32K" (K = 1024, as chunk sizes
    and context lengths are spoken of), anything else exact with thousands separators."""
    if n >= 2048 and n % 1024 == 0:
        return f"{n // 1024}K"
    return f"{n:,}"
