"""Progress bars (rich) on the console the report goes to: stdout stays clean for --json.

Every bar fits its console (the law of kttune.emit.terminal.fits, at 80 and 60 columns): one line
per task when it fits (label, bar, count, elapsed and ETA, status), else a compact line (label, a
bar sized to what is left, count, `1:23 eta 0:45`) with the status on a line of its own below it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from kttune.emit.terminal import UNLIMITED


def clock(seconds: float | None) -> str:
    """`m:ss` below an hour, `h:mm:ss` from there; `-:--` when unknown."""
    if seconds is None:
        return "-:--"
    s = max(0, int(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class ElapsedEtaColumn(ProgressColumn):
    """`1:23 eta 0:45`: elapsed and remaining time in one short column."""

    def render(self, task: Task) -> Text:
        eta = None if task.finished else task.time_remaining
        return Text(f"{clock(task.elapsed)} eta {clock(0 if task.finished else eta)}", style="progress.remaining")


class FittedProgress(Progress):
    """A rich Progress whose line fits the console: the wide columns when they fit, else the
    compact ones with each task's status (`status_field`) on a line of its own."""

    def __init__(self, label: Any, status_field: str, console: Any, transient: bool, spinner: bool = False) -> None:
        self.status_field = status_field
        lead = [SpinnerColumn()] if spinner else []
        self.wide_columns = (
            *lead,
            label,
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn(f"{{task.fields[{status_field}]}}"),
        )
        self._lead = (*lead, label)
        super().__init__(*self.wide_columns, console=console, transient=transient)

    def _width(self, columns) -> int:
        """The cells a line of these columns takes, unclamped by the console."""
        self.columns = columns
        return Measurement.get(
            self.console, self.console.options.update_width(UNLIMITED), self.make_tasks_table(self.tasks)
        ).maximum

    def _fits(self, columns) -> bool:
        return self._width(columns) <= self.console.width

    def compact_columns(self, bar_width: int) -> tuple:
        return (*self._lead, BarColumn(bar_width=bar_width), MofNCompleteColumn(), ElapsedEtaColumn())

    def get_renderables(self):
        if "live" not in self.__dict__ or self._fits(self.wide_columns):  # rich asks once before its Live exists
            yield self.make_tasks_table(self.tasks)
            return
        spare = self.console.width - self._width(self.compact_columns(1)) + 1
        self.columns = self.compact_columns(max(1, min(40, spare)))
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            status = str(task.fields.get(self.status_field, "") or "")
            if task.visible and status:
                yield Text("  " + status, overflow="fold")


@contextmanager
def search_progress(console: Any, total: int) -> Iterator[Callable[[int, int, Any], None]]:
    """A transient bar over the search's trials; yields the `on_trial(done, total, best)` callback
    that `kttune.app.search` takes."""
    with FittedProgress(TextColumn("searching"), "best", console, transient=True) as prog:
        task = prog.add_task("search", total=total, best="")

        def on_trial(done: int, total: int, best) -> None:
            text = f"best mean prefill {best.mean_ttft_ms / 1e3:.2f} s" if best else ""
            prog.update(task, completed=done, total=total, best=text)

        yield on_trial


@contextmanager
def measure_progress(console: Any, total: int) -> Iterator[Callable[[int, int, float | None], None]]:
    """A transient bar over a measured search's trials; yields its `on_trial(done, total, best_tok_s)`."""
    with FittedProgress(TextColumn("measuring"), "best", console, transient=True) as prog:
        task = prog.add_task("measure", total=total, best="")

        def on_trial(done: int, total: int, best: float | None) -> None:
            prog.update(task, completed=min(done, total), best=f"best {best:,.0f} tok/s" if best else "")

        yield on_trial


class ProbeProgress:
    """The probes' reporter (kttune.probes.common): a progress bar with ETA on `console`."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.progress = FittedProgress(
            TextColumn("[bold]{task.fields[title]}"), "status", console, transient=False, spinner=True
        )
        self.task = None

    def __enter__(self) -> "ProbeProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def plan(self, total_steps: int, title: str) -> None:
        if self.task is None:
            self.task = self.progress.add_task("", total=total_steps, title=title, status="")
        else:
            self.progress.update(self.task, total=total_steps, title=title)

    def step(self, description: str, advance: float = 1.0) -> None:
        if self.task is None:
            self.plan(0, "probe")
        self.progress.update(self.task, advance=advance, status=description)

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]note:[/] {message}", highlight=False)


def simulate_bar(console: Any) -> Any:
    """The simulation's progress display: one transient line per step (a schedule, with requests
    done of the total, or the capacity search); short columns so it fits 60 terminal columns."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(bar_width=None),
        TaskProgressColumn(),
        TimeRemainingColumn(compact=True),
        console=console,
        transient=True,
        expand=True,
    )


def simulate_updater(prog: Any) -> Callable[[str, int, int], None]:
    """The `on_progress(step, done, total)` callback kttune.sim.simulate.simulate takes, on `prog`."""
    tasks: dict[str, Any] = {}

    def on_progress(step: str, done: int, total: int) -> None:
        if step not in tasks:
            tasks[step] = prog.add_task(step, total=max(1, total))
        prog.update(tasks[step], completed=done, total=max(1, total))

    return on_progress


@contextmanager
def simulate_progress(console: Any) -> Iterator[Callable[[str, int, int], None]]:
    """`simulate_bar` shown while the block runs; yields its `on_progress` callback."""
    with simulate_bar(console) as prog:
        yield simulate_updater(prog)
