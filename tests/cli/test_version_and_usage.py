"""`kttune --version` and a bare `kttune`: what a new user types first."""

from __future__ import annotations

from importlib.metadata import version

from kttune.cli import main


def test_version_comes_from_the_package_metadata(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == f"kttune {version('kttune')}" and out.err == ""


def test_no_arguments_prints_the_commands_and_which_to_try(capsys):
    assert main([]) == 2  # no command is a usage error, as click has it
    out = capsys.readouterr()
    assert "Usage: kttune" in out.out and "search" in out.out and "probe" in out.out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no command given")
    assert "kttune search --model qwen3-30b-a3b --vram 32G" in lines[0]


def test_a_group_without_its_subcommand(capsys):
    assert main(["profile"]) == 2
    out = capsys.readouterr()
    assert "show" in out.out and "derive" in out.out
    assert (
        out.err.strip()
        == "error: no command given; pick one of the commands above (`kttune profile COMMAND --help` explains each)"
    )
