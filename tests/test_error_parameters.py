"""The core names parameters, the CLI spells them (kttune.errors, kttune.cli.flags): no module of
the core writes a command-line flag into an error, and every parameter an error names has its flag
in the CLI's one table. Checked on the source with `ast`, as tests/test_import_boundaries.py checks
imports, so a message in a branch no test reaches is seen too.

Two rules, over the string literals of kttune/spec, hw, memory, cost, calibration, search and sim (docstrings
left out):
  1. in an error (a call to `...Error(...)`, `_error(...)`, `read_json_file`/`loads_json`, or any
     call with a `fix=`), no `--flag` at all: kttune's are `{param}` templates, sglang-kt's come
     from kttune.spec.launch_args.flag_name;
  2. anywhere, no flag that only kttune's CLI has (`--vram`, `--gpus`, `--storage`, ...): a helper
     that builds part of a message (HostRamSource) must not either.
A suggested command in backticks (`` `kttune probe --threads 15` ``) names a command to run, not a
parameter of this call, and is allowed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import typer

from kttune.cli import app
from kttune.cli.flags import FLAGS
from kttune.spec.launch_args import FLAGS as SGLANG_FLAGS, IGNORED

ROOT = Path(__file__).resolve().parents[1]
CORE_DIRS = ("spec", "hw", "memory", "cost", "calibration", "search", "sim")
FLAG_RE = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
SUGGESTION_RE = re.compile(r"`kttune [^`]*`")
ERROR_CALLS = ("read_json_file", "loads_json")
PARAM_RE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")

# Notes (not errors) that name a kttune flag, each with why it may.
ALLOWED_NOTES = {
    (
        "kttune/search/storage.py",
        "--storage :memory: keeps the study in this process only",
    ): "the note of a throwaway study, printed with the result",
}


def _core_files() -> list[Path]:
    return sorted(f for d in CORE_DIRS for f in (ROOT / "kttune" / d).rglob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                ids.add(id(first.value))
    return ids


def _strings(node: ast.AST, skip: set[int]) -> list[tuple[int, str]]:
    """Every string literal under `node`; an f-string as one text, `{}` for what it interpolates."""
    out, inner = [], set()
    for n in ast.walk(node):
        if isinstance(n, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in n.values]
            inner |= {id(v) for v in n.values}
            out.append((n.lineno, "".join(map(str, parts))))
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip | inner:
            out.append((n.lineno, n.value))
    return out


def _is_error_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name.lower().endswith("error") or name in ERROR_CALLS or any(k.arg == "fix" for k in node.keywords)


def _flags(text: str) -> list[str]:
    return FLAG_RE.findall(SUGGESTION_RE.sub("", text))


def _cli_flags() -> set[str]:
    def walk(cmd):
        for sub in getattr(cmd, "commands", {}).values():
            yield from walk(sub)
        for p in cmd.params:
            yield from (o for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())) if o.startswith("--"))

    return set(walk(typer.main.get_command(app)))


def _sglang_flags() -> set[str]:
    return {n for f in SGLANG_FLAGS for n in f.names} | {n for names, *_ in IGNORED for n in names}


def offences(files: list[Path], kttune_only: set[str], root: Path = ROOT) -> list[str]:
    out = []
    for f in files:
        rel = str(f.relative_to(root))
        tree = ast.parse(f.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if _is_error_call(node):
                out += [
                    f"{rel}:{line}: {fl} in an error: {text[:70]!r}"
                    for line, text in _strings(node, skip)
                    for fl in _flags(text)
                ]
        for line, text in _strings(tree, skip):
            if any(rel == r and text.startswith(t) for r, t in ALLOWED_NOTES):
                continue
            out += [f"{rel}:{line}: kttune's {fl}: {text[:70]!r}" for fl in _flags(text) if fl in kttune_only]
    return sorted(set(out))


def test_the_core_names_no_cli_flag_in_an_error():
    kttune_only = _cli_flags() - _sglang_flags()
    assert {"--vram", "--gpus", "--storage", "--host-ram", "--chunks"} <= kttune_only  # the check sees the CLI
    bad = offences(_core_files(), kttune_only)
    assert not bad, "CLI flags in the core:\n" + "\n".join(bad)


def test_every_parameter_an_error_names_has_a_flag():
    """A `{param}` of a core error is in kttune.cli.flags.FLAGS: the CLI never prints a Python name."""
    named = set()
    for f in _core_files():
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if _is_error_call(node):
                named |= {m for _, text in _strings(node, set()) for m in PARAM_RE.findall(text)}
                named |= {
                    a.value
                    for a in node.args[:1]
                    if isinstance(a, ast.Constant)
                    and isinstance(a.value, str)
                    and getattr(node.func, "id", "") == "ParameterError"
                }
                for k in node.keywords:
                    if k.arg in ("params", "also") and isinstance(k.value, ast.Tuple):
                        named |= {e.value for e in k.value.elts if isinstance(e, ast.Constant)}
    assert named >= {"vram_bytes", "gpus", "storage", "threshold"}, named
    missing = sorted(n for n in named if n not in FLAGS)
    assert not missing, f"parameters named by core errors without a flag in kttune.cli.flags.FLAGS: {missing}"


def test_the_check_catches_a_flag(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'def f(n):\n    """--gpus is fine here."""\n'
        '    raise UserError(f"--gpus {n} must be at least 1", "pass `kttune probe --quick` first")\n'
        'NOTE = "raise --vram"\n'
    )
    found = offences([bad], {"--gpus", "--vram"}, root=tmp_path)
    assert any("--gpus in an error" in o for o in found), found
    assert any("kttune's --vram" in o for o in found), found
    assert not any("--quick" in o for o in found), found  # a suggested command in backticks
    assert not any(":2:" in o for o in found), found  # the docstring
