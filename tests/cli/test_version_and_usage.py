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


def test_the_command_list_wraps_each_summary_as_one_paragraph(capsys, monkeypatch):
    """A command's summary is its docstring's first paragraph, written over several source lines;
    the list reflows it to the terminal's width instead of keeping the source's line breaks (rich
    markup kept them, leaving lines of one or two words: `kttune --help`, the first screen a new user
    sees)."""
    monkeypatch.setenv("COLUMNS", "100")
    main(["--help"])
    out = capsys.readouterr().out
    rows: list[list[str]] = []
    inside = False
    for line in out.splitlines():
        if "Commands" in line and line.lstrip().startswith("╭"):
            inside = True
            continue
        if inside and line.lstrip().startswith("╰"):
            break
        if inside:
            cell = line.strip()[1:-1]  # inside the box's side lines
            if cell[1:2].strip():  # a new command's row: its name, then its summary
                rows.append([cell.split(None, 1)[1].strip()])
            else:
                rows[-1].append(cell.strip())
    assert {"search", "tune", "explain", "probe"} <= {r for r in out.split()}
    assert len(rows) >= 10
    width = max(len(line) for row in rows for line in row)
    for row in rows:
        for line in row[:-1]:  # every line but a summary's last fills the column, bar one word
            assert len(line) > width - 20, (row, line)


def test_help_text_keeps_square_brackets(capsys, monkeypatch):
    """Brackets in help text are text (rich markup would read `[...]` as a style and drop it)."""
    monkeypatch.setenv("COLUMNS", "120")
    main(["explain", "--help"])
    assert "[-- COMMAND...]" in capsys.readouterr().out
