"""`kttune models`, `kttune profiles`, `kttune workloads`: what kttune knows (kttune.app.catalog),
as tables or JSON."""

from __future__ import annotations

import typer

from kttune.cli.options import Json


def models(json_out: Json = False) -> None:
    """List the built-in model catalog."""
    from kttune import app
    from kttune.cli.common import console, emit_json
    from kttune.emit import report

    listing = app.list_models()
    if json_out:
        emit_json(listing.to_dict())
        return
    c = console(False)
    c.print(report.models_table(listing.entries, c.width))


def profiles(json_out: Json = False) -> None:
    """List the shipped hardware profiles (and whether this machine has a probed one)."""
    from kttune import app
    from kttune.cli.common import console, emit_json
    from kttune.emit import report

    listing = app.list_profiles()
    if json_out:
        emit_json(listing.to_dict())
        return
    report.render_profiles(console(False), listing)


def workloads(json_out: Json = False) -> None:
    """List the workload presets."""
    from kttune import app
    from kttune.cli.common import console, emit_json
    from kttune.emit import report

    listing = app.list_workloads()
    if json_out:
        emit_json(listing.to_dict())
        return
    report.render_workloads(console(False), listing.workloads)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("profiles")(profiles)
    app.command("workloads")(workloads)
