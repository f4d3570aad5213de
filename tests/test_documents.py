"""kttune.documents: which existing files a command may write over. Its own earlier output only
(the same kind of document, of the same machine for a measured profile), never one of its
inputs, never a directory that is not a kttune report; every refusal changes nothing."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kttune.documents import (
    PATHS_OUTPUT,
    check_output_file,
    check_report_dir,
    describe,
    profile_output,
    profile_output_from,
)
from kttune.errors import UserError
from kttune.hw.profile import profile_to_dict, save_profile
from kttune.hw.registry import load_shipped

MEASURED = load_shipped("h200-pcie5-xeon-amx-16c")
OTHER_MACHINE = load_shipped("h200x2-pcie5-xeon-amx-32c")
DERIVED = replace(MEASURED, provenance=replace(MEASURED.provenance, command="kttune profile derive", kind="mixed"))
RESULT = {"request": {"model": "qwen3-30b-a3b"}, "runs": [], "summary": {}, "notes": []}


def _refused(path: Path, out, **kw) -> str:
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(UserError) as ei:
        check_output_file(path, out, **kw)
    assert (path.read_bytes() if path.is_file() else None) == before
    line = ei.value.line()
    assert "\n" not in line and str(path) in line
    return line


def test_a_new_path_and_an_empty_file_take_any_output(tmp_path):
    assert (
        check_output_file(tmp_path / "new" / "p.json", profile_output("kttune probe", "fp", False))
        == tmp_path / "new" / "p.json"
    )
    (tmp_path / "empty.json").write_bytes(b"")
    check_output_file(tmp_path / "empty.json", PATHS_OUTPUT)


def test_a_measured_profile_replaces_only_a_measured_profile_of_its_machine(tmp_path):
    f = save_profile(MEASURED, tmp_path / "p.json")
    check_output_file(f, profile_output_from("kttune calibrate", MEASURED))
    line = _refused(f, profile_output_from("kttune calibrate", OTHER_MACHINE))
    assert "another machine" in line and "move" in line
    assert "derived" not in describe(profile_to_dict(MEASURED))
    _refused(f, profile_output("kttune profile derive", "", derived=True))  # derive never over a measurement


def test_a_derived_profile_replaces_only_a_derived_profile(tmp_path):
    f = save_profile(DERIVED, tmp_path / "d.json")
    check_output_file(f, profile_output("kttune profile derive", "", derived=True))
    assert "derived" in _refused(f, profile_output_from("kttune probe", MEASURED))


@pytest.mark.parametrize(
    "content",
    [b"notes\n", b"[1, 2]", b'"abc"', json.dumps(RESULT).encode(), b"\x00\xff" * 10, b'{"pick": {}, "pareto": []}'],
)
def test_anything_else_is_refused_naming_what_it_holds(tmp_path, content):
    f = tmp_path / "x.json"
    f.write_bytes(content)
    line = _refused(f, profile_output("kttune profile derive", "", derived=True))
    assert "holds " in line and "pass --out a new file" in line
    if content == json.dumps(RESULT).encode():
        assert "path-runner result" in line
        check_output_file(f, PATHS_OUTPUT)  # which `kttune paths --out` replaces


def test_an_input_is_never_an_output_even_of_its_own_kind(tmp_path):
    f = save_profile(MEASURED, tmp_path / "p.json")
    line = _refused(f, profile_output_from("kttune calibrate", MEASURED), inputs=[(f, "--profile")])
    assert "--profile" in line
    link = tmp_path / "link.json"
    link.symlink_to(f)
    _refused(link, profile_output_from("kttune calibrate", MEASURED), inputs=[(f, "--profile")])


def test_places_that_cannot_take_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    assert "is a directory" in _refused(tmp_path, PATHS_OUTPUT)
    assert "which is a file" in _refused(tmp_path / "file" / "r.json", PATHS_OUTPUT)


def test_report_dirs(tmp_path):
    check_report_dir(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_report_dir(tmp_path / "empty")
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "report.md").write_text("# kttune report\n\nWritten by kttune 0.1 at now.\n")
    (ours / "vram.png").write_bytes(b"png")
    check_report_dir(ours)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not a kttune report \\(notes.txt\\)"):
        check_report_dir(foreign)
    (foreign / "report.md").write_text("# my own report\n")
    with pytest.raises(UserError, match="not a kttune report"):
        check_report_dir(foreign)
    with pytest.raises(UserError, match="is a file"):
        check_report_dir(foreign / "notes.txt")
    (ours / "profile.json").write_text("{}")
    with pytest.raises(UserError, match="profile.json, this command's --profile"):
        check_report_dir(ours, inputs=[(ours / "profile.json", "--profile")])
    assert (foreign / "notes.txt").read_text() == "mine"
