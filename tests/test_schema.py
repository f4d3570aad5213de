"""One envelope on the JSON documents kttune writes: `{"schema": "kttune.<doc>/<n>", ...}` first,
a kind kttune.schema lists; `kttune report` dispatches on it, and still reads a document written
before the envelope by its keys (the shipped results and fixtures carry none)."""

from __future__ import annotations

import json

import pytest

from kttune.cli import main
from kttune.emit.markdown_report import classify
from kttune.schema import VERSIONS, doc_kind, enveloped, schema

SHIPPED = ["--profile", "h200-pcie5-xeon-amx-16c"]
COMMANDS = {
    "search": [
        "search",
        "-m",
        "qwen3-30b-a3b",
        "--vram",
        "32G",
        "--trials",
        "8",
        "--seed",
        "1",
        "--storage",
        ":memory:",
        *SHIPPED,
    ],
    "explain": ["explain", "-m", "qwen3-30b-a3b", "--vram", "32G", "--gpu-experts", "4", *SHIPPED],
    "simulate": ["simulate", "-m", "qwen3-30b-a3b", "--requests", "20", "--schedules", "chunked", *SHIPPED],
    "profiles": ["profiles"],
    "profile": ["profile", "show", "h200-pcie5-xeon-amx-16c"],
}


@pytest.mark.parametrize("doc", sorted(COMMANDS))
def test_a_command_document_opens_with_its_schema(doc, capsys):
    assert main([*COMMANDS[doc], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert next(iter(out)) == "schema" and out["schema"] == schema(doc)
    assert doc_kind(out) == (doc, VERSIONS[doc])


def test_derive_and_the_profile_it_writes(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main(["profile", "derive", "h200-pcie5-xeon-amx-16c", "--gpus", "2", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == schema("derive")
    assert json.loads(out.read_text())["schema"] == schema("profile")


def test_doc_kind_reads_only_kttune_schemas():
    assert doc_kind({"schema": "kttune.search/1"}) == ("search", 1)
    for other in ({}, [], {"schema": "other/1"}, {"schema": "kttune.search"}, {"schema": 3}):
        assert doc_kind(other) is None
    assert list(enveloped("tune", {"schema": "x", "a": 1})) == ["schema", "a"]


def test_report_dispatches_on_the_schema_and_reads_older_documents_by_their_keys(capsys):
    assert main([*COMMANDS["search"], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert classify(doc) == "search"
    older = {k: v for k, v in doc.items() if k != "schema"}  # as written before the envelope
    assert classify(older) == "search"
    # the schema decides, not the keys: a tune result holds no section of a report
    assert classify({**doc, "schema": schema("tune")}) is None
