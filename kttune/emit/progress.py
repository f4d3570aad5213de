"""Progress bars (rich) on the console the report goes to: stdout stays clean for --json."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator


@contextmanager
def search_progress(console: Any, total: int) -> Iterator[Callable[[int, int, Any], None]]:
    """A transient bar over the search's trials; yields the `on_trial(done, total, best)` callback
    that `kttune.api.search` takes."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("searching"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  TextColumn("{task.fields[best]}"), console=console, transient=True) as prog:
        task = prog.add_task("search", total=total, best="")

        def on_trial(done: int, total: int, best) -> None:
            text = f"best mean prefill {best.mean_ttft_ms / 1e3:.2f} s" if best else ""
            prog.update(task, completed=done, total=total, best=text)

        yield on_trial


class ProbeProgress:
    """The probes' reporter (kttune.probes.common): a progress bar with ETA on `console`."""

    def __init__(self, console: Any) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[title]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=False,
        )
        self.task = None

    def __enter__(self) -> "ProbeProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def plan(self, total_steps: int, title: str) -> None:
        if self.task is None:
            self.task = self.progress.add_task("", total=total_steps, title=title)
        else:
            self.progress.update(self.task, total=total_steps, title=title)

    def step(self, description: str, advance: float = 1.0) -> None:
        if self.task is None:
            self.plan(0, "probe")
        self.progress.update(self.task, advance=advance, description=description)

    def note(self, message: str) -> None:
        self.progress.console.print(f"[yellow]note:[/] {message}", highlight=False)


def simulate_bar(console: Any) -> Any:
    """The simulation's progress display: one transient line per step (a schedule, with requests
    done of the total, or the capacity search); short columns so it fits 60 terminal columns."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(bar_width=None), TaskProgressColumn(),
                    TimeRemainingColumn(compact=True), console=console, transient=True, expand=True)


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
