"""The `kttune` command line. Thin: each command parses, calls one library function, renders."""

from __future__ import annotations

import sys

import typer

from kttune.errors import UserError

app = typer.Typer(
    name="kttune",
    help="Measure a KTransformers + SGLang hybrid MoE host and pick its prefill launch flags.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_optional(module: str) -> None:
    """Command groups that live beside the spine (probes) register themselves here."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return
        raise
    mod.register(app)


_register_optional("kttune.cli_probe")


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, standalone_mode=False)
    except UserError as e:
        typer.echo(f"error: {e.line()}", err=True)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except (typer.Abort, KeyboardInterrupt):
        typer.echo("aborted", err=True)
        return 130
    except Exception as e:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
