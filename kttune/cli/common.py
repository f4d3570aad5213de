"""What every `kttune` command shares. `kttune.cli.main` applies it around the whole app, so a
command module (`kttune/cli/<name>.py`) gets it by raising and printing as below, nothing more.

Exit codes (`run_app`):
  0    success
  1    the answer is "does not fit" / "nothing feasible": raise `kttune.errors.InfeasibleError`
       (a one-line error) or `typer.Exit(1)` after printing the report
  2    bad input: raise `kttune.errors.UserError(problem, fix)` (the parameters a library error
       names are spelled as flags here, once: kttune.cli.flags); click usage errors (a bare `kttune`
       prints the help and which command to try); an OSError on a file the user named (its path and
       reason are printed); a missing optional part (`kttune.extras`: the line names its install)
  130  interrupted (Ctrl-C / SIGINT): finished work must already be saved
  3    an unexpected exception: a kttune bug, still one line (`KTTUNE_TRACEBACK=1` shows the trace)

Errors are one line on stderr, `error: <problem>; <fix>`, never a traceback.

`--json`: stdout carries the JSON document and nothing else. Print it with `emit_json` and the
human report on `console(json_out)` (stderr under --json). For the process's lifetime (the
console script) file descriptor 1 is pointed at stderr and Python's `sys.stdout` writes to a
saved duplicate of the real stdout, so what native code prints on fd 1 (kt-kernel's
`CPUInfer[...]: Goodbye` lines at interpreter exit) lands on stderr.

A reader that goes away (`kttune search ... | head -1`, a closed stdout `>&-`): what is still to
print goes to /dev/null and the command ends with its own exit code (0, or 1 for "does not fit"),
never a traceback and never exit 1 for the pipe (`reader_safe_streams`).

Encoding: stdout and stderr are reconfigured with `errors="replace"`, so a non-UTF-8 locale
(`LC_ALL=C PYTHONCOERCECLOCALE=0`) prints `?` for what it cannot encode instead of crashing.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

INTERRUPTED = "interrupted; finished work is saved: rerun the same command to resume"

EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def error_line(message: str) -> None:
    """Print one `error: ...` line on stderr (newlines folded), with any storage password this
    process has seen blanked out (kttune.search.storage_url.redact)."""
    from kttune.app.names import redact

    print("error: " + redact(" ".join(str(message).split())), file=sys.stderr, flush=True)


def console(json_out: bool = False) -> Any:
    """The rich console a command reports on: stderr under --json, else stdout."""
    from rich.console import Console

    return Console(stderr=json_out)


def emit_json(obj: Any) -> None:
    """Print the machine-readable result: one JSON document on the real stdout."""
    import json

    sys.stdout.write(json.dumps(obj, indent=1, default=str) + "\n")
    sys.stdout.flush()


def safe_streams() -> None:
    """Never raise UnicodeEncodeError on output (non-UTF-8 locales)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass


def json_stdout_for_process() -> None:
    """Point fd 1 at stderr for the rest of the process; `sys.stdout` keeps the real stdout."""
    try:
        sys.stdout.flush()
        real = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        return
    enc = getattr(sys.stdout, "encoding", None) or "utf-8"
    sys.stdout = open(real, "w", encoding=enc, errors="replace", closefd=True)


class _ReaderSafe:
    """The process's stdout: when the reader is gone (EPIPE), the file descriptor is pointed at
    /dev/null and writing goes on there, so the command finishes its work and its exit code."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def _reader_gone(self) -> None:
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()
            try:
                self._stream.flush()  # what was buffered goes to /dev/null
            except OSError:
                pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def reader_safe_streams() -> None:
    """For the process (the console script): a stdout or stderr closed at start (`>&-`) is opened
    on /dev/null (Python leaves it None, and every print would fail); stdout survives its reader
    going away (`_ReaderSafe`)."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        if getattr(sys, name) is None:
            try:
                os.fstat(fd)
            except OSError:  # closed: the lowest free descriptor is this one, so /dev/null takes it
                null = os.open(os.devnull, os.O_WRONLY)
                if null != fd:
                    os.dup2(null, fd)
                    os.close(null)
            try:
                setattr(sys, name, open(fd, "w", encoding="utf-8", errors="replace", closefd=False))
            except OSError:
                setattr(sys, name, open(os.devnull, "w"))
    if not isinstance(sys.stdout, _ReaderSafe):
        sys.stdout = _ReaderSafe(sys.stdout)


def _click_exception_types() -> tuple[type, ...]:
    """ClickException as typer raises it: typer >= 0.24 vendors click as `typer._click`; older
    typers use click itself."""
    import importlib

    found = []
    for mod in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(mod).ClickException)
        except ImportError:
            pass
    return tuple(found)


def no_command_line(where: str) -> str:
    """What follows the help typer prints for a bare `kttune` (or `kttune profile`): which command to try."""
    if where == "kttune":
        return (
            "no command given; pick one of the commands above, e.g. `kttune search --model qwen3-30b-a3b "
            "--vram 32G` (the main job, on a shipped profile)"
        )
    return f"no command given; pick one of the commands above (`{where} COMMAND --help` explains each)"


def _os_error_line(e: OSError) -> str:
    where = f" {e.filename}" if getattr(e, "filename", None) else ""
    return f"cannot use{where}: {e.strerror or e}; check the path and its permissions"


def _interrupted_within(e: BaseException) -> bool:
    """Whether a Ctrl-C is what `e` arose from: a library's cleanup that failed while a
    KeyboardInterrupt passed through it (Optuna 5.0's `_run_trial` reads an unset local in its
    `finally` when the interrupt lands in `_tell_with_warning`: an UnboundLocalError whose context
    is the KeyboardInterrupt)."""
    seen: set[int] = set()
    cur = e.__context__
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__context__
    return False


def run_app(app: Callable[..., Any], argv: list[str] | None) -> int:
    """Run the typer app (non-standalone) and map every outcome to an exit code (see above).
    `argv` None: a process entry (the console script): --json then redirects fd 1 for good."""
    import typer

    from kttune.cli.flags import spelled
    from kttune.errors import UserError
    from kttune.app.names import forget_passwords

    forget_passwords()
    if argv is None:
        reader_safe_streams()
    safe_streams()
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None and "--json" in args:
        json_stdout_for_process()
        reader_safe_streams()
    try:
        # typer turns Ctrl-C into Exit(130), which non-standalone mode returns as the value.
        rc = app(args=args, standalone_mode=False, prog_name="kttune")
        rc = rc if isinstance(rc, int) else EXIT_OK
        if rc == EXIT_INTERRUPTED:
            error_line(INTERRUPTED)
        return rc
    except UserError as e:
        error_line(spelled(e).line())
        return e.exit_code
    except typer.Exit as e:
        if e.exit_code == EXIT_INTERRUPTED:
            error_line(INTERRUPTED)
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        error_line(INTERRUPTED)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # a reader gone past the guard (a stream a library opened on fd 1)
        _ReaderSafe(sys.stdout)._reader_gone()
        return EXIT_OK
    except Exception as e:  # noqa: BLE001 -- the one place an exception becomes a line
        if isinstance(e, _click_exception_types()):
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else "kttune"
            msg = " ".join(e.format_message().split()).rstrip(".")
            error_line(f"{msg}; see `{where} --help`" if msg else no_command_line(where))
            return EXIT_BAD_INPUT
        if isinstance(e, ModuleNotFoundError):
            from kttune.extras import missing_from

            if (missing := missing_from(e)) is not None:
                error_line(missing.line())
                return EXIT_BAD_INPUT
        if isinstance(e, OSError):
            error_line(_os_error_line(e))
            return EXIT_BAD_INPUT
        if _interrupted_within(e):
            error_line(INTERRUPTED)
            return EXIT_INTERRUPTED
        if os.environ.get("KTTUNE_TRACEBACK"):
            raise
        error_line(
            f"unexpected {type(e).__name__}: {' '.join(str(e).split())[:300]}; this is a kttune bug: "
            "rerun with KTTUNE_TRACEBACK=1 and report the traceback"
        )
        return EXIT_BUG
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError, AttributeError):
            pass
