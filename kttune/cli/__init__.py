"""The `kttune` command line. Thin: each command parses (kttune.cli.options, kttune.app.resolve),
calls one function of the facade (kttune.app), renders (kttune.emit). One module per command or
group; each registers itself on `app` (`register(app)`)."""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    name="kttune",
    help="Measure a KTransformers + SGLang hybrid MoE host and pick its prefill launch flags.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help text is Markdown: a docstring's paragraph reflows to the terminal (rich markup keeps its
    # source line breaks) and `[...]` stays text.
    rich_markup_mode="markdown",
)


def _print_version(value: bool) -> None:
    if value:
        from kttune.schema import kttune_version

        typer.echo(f"kttune {kttune_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print kttune's version (from the installed package) and exit.",
    ),
) -> None:
    pass


def _register(module: str) -> None:
    """Command groups that live beside the spine (probes) register themselves here; a module this
    build lacks leaves its commands out."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            return
        raise
    mod.register(app)


# in the order `kttune --help` lists them
for _name in ("search", "explain", "catalog", "probe", "report", "validate", "simulate", "paths", "derive", "tune"):
    _register(f"kttune.cli.{_name}")


def main(argv: list[str] | None = None) -> int:
    """The console script. Exit codes, one-line errors, --json stdout hygiene and safe output
    encoding for every command: kttune.cli.common."""
    from kttune.cli.common import run_app

    return run_app(app, argv)


if __name__ == "__main__":
    sys.exit(main())
