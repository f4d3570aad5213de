"""What every `kttune` command shares. `kttune.cli.main` applies it around the whole app, so a
command module (`kttune/cli_<name>.py`) gets it by raising and printing as below, nothing more.

Exit codes (`run_app`):
  0    success
  1    the answer is "does not fit" / "nothing feasible": raise `kttune.errors.InfeasibleError`
       (a one-line error) or `typer.Exit(1)` after printing the report
  2    bad input: raise `kttune.errors.UserError(problem, fix)`; click usage errors; an OSError on a
       file the user named (its path and reason are printed)
  130  interrupted (Ctrl-C / SIGINT): finished work must already be saved
  3    an unexpected exception: a kttune bug, still one line (`KTTUNE_TRACEBACK=1` shows the trace)

Errors are one line on stderr, `error: <problem>; <fix>`, never a traceback.

`--json`: stdout carries the JSON document and nothing else. Print it with `emit_json` and the
human report on `console(json_out)` (stderr under --json). For the process's lifetime (the
console script) file descriptor 1 is pointed at stderr and Python's `sys.stdout` writes to a
saved duplicate of the real stdout, so what native code prints on fd 1 (kt-kernel's
`CPUInfer[...]: Goodbye` lines at interpreter exit) lands on stderr.

Encoding: stdout and stderr are reconfigured with `errors="replace"`, so a non-UTF-8 locale
(`LC_ALL=C PYTHONCOERCECLOCALE=0`) prints `?` for what it cannot encode instead of crashing.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

INTERRUPTED = "interrupted; finished work is saved: rerun the same command to resume"

# ---- help of the options several commands share (one wording everywhere) ---------------------------
MODEL_HELP = "Catalog name (`kttune models`), HF repo id, or a directory holding config.json (+ safetensors)."
VRAM_HELP = "VRAM budget per GPU: 32G, 32GiB, 24GB or 32000M (binary units; a bare number is GiB)."
PROFILE_HELP = "Hardware profile: a file from `kttune probe`, or a shipped name (`kttune profiles`). Default: this machine's probe, else the shipped default."
MARGIN_HELP = "Share of the VRAM budget kept free for what the model does not see (the same rule in search and explain)."
WORKLOAD_HELP = "Workload preset (`kttune workloads`), a JSON file of prompt lengths, or a trace (.csv / .jsonl of arrival_s, prompt_tokens, output_tokens)."
EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def error_line(message: str) -> None:
    """Print one `error: ...` line on stderr (newlines folded)."""
    print("error: " + " ".join(str(message).split()), file=sys.stderr, flush=True)


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


def _os_error_line(e: OSError) -> str:
    where = f" {e.filename}" if getattr(e, "filename", None) else ""
    return f"cannot use{where}: {e.strerror or e}; check the path and its permissions"


def run_app(app: Callable[..., Any], argv: list[str] | None) -> int:
    """Run the typer app (non-standalone) and map every outcome to an exit code (see above).
    `argv` None: a process entry (the console script): --json then redirects fd 1 for good."""
    import typer

    from kttune.errors import UserError

    safe_streams()
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None and "--json" in args:
        json_stdout_for_process()
    try:
        # typer turns Ctrl-C into Exit(130), which non-standalone mode returns as the value.
        rc = app(args=args, standalone_mode=False, prog_name="kttune")
        rc = rc if isinstance(rc, int) else EXIT_OK
        if rc == EXIT_INTERRUPTED:
            error_line(INTERRUPTED)
        return rc
    except UserError as e:
        error_line(e.line())
        return e.exit_code
    except typer.Exit as e:
        if e.exit_code == EXIT_INTERRUPTED:
            error_line(INTERRUPTED)
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        error_line(INTERRUPTED)
        return EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 -- the one place an exception becomes a line
        if isinstance(e, _click_exception_types()):
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else "kttune"
            msg = " ".join(e.format_message().split()).rstrip(".")
            error_line(f"{msg}; see `{where} --help`")
            return EXIT_BAD_INPUT
        if isinstance(e, OSError):
            error_line(_os_error_line(e))
            return EXIT_BAD_INPUT
        if os.environ.get("KTTUNE_TRACEBACK"):
            raise
        error_line(f"unexpected {type(e).__name__}: {' '.join(str(e).split())[:300]}; this is a kttune bug: "
                   "rerun with KTTUNE_TRACEBACK=1 and report the traceback")
        return EXIT_BUG
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
