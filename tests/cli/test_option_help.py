"""Options that several commands share read the same everywhere: their help comes from
kttune.cli.common, and no command carries its own (possibly stale) wording."""

from __future__ import annotations

import typer

from kttune.cli import app
from kttune.cli.options import MODEL_HELP, VRAM_HELP


def _options(cmd, path: str = "kttune"):
    """(command path, option) of every command and subcommand (typer carries its own click)."""
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _options(sub, f"{path} {name}")
    for p in cmd.params:
        if p.param_type_name == "option":
            yield path, p


def test_model_and_vram_help_is_one_text_in_every_command():
    seen = {"--model": set(), "--vram": set()}
    for where, opt in _options(typer.main.get_command(app)):
        if "--vram" in opt.opts:
            assert opt.help == VRAM_HELP, where
            seen["--vram"].add(where)
        if "--model" in opt.opts and "-m" in opt.opts:  # the model to plan for (probe's --model picks a shape)
            assert opt.help == MODEL_HELP, where
            seen["--model"].add(where)
    # the check saw the commands it is about
    assert {"kttune search", "kttune explain", "kttune validate"} <= seen["--vram"]
    assert {"kttune search", "kttune explain", "kttune validate", "kttune simulate"} <= seen["--model"]


def test_every_numeric_option_is_bounded_and_its_help_states_the_range():
    """One validation layer (kttune.bounds through kttune.cli.bounds): no int or float option
    escapes it, and `--help` says what it accepts."""
    from typing import Optional

    from kttune.cli.bounds import rule_of

    numeric = (int, float, Optional[int], Optional[float])
    seen = 0
    for where, opt in _options(typer.main.get_command(app)):
        rule = rule_of(opt)
        if opt.type_descriptor.annotation in numeric:
            assert rule is not None, (where, opt.opts)
        if rule is not None:
            assert f"Range: {rule.describe()}." in opt.help, (where, opt.opts, opt.help)
            seen += 1
    assert seen >= 40
