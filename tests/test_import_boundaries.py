"""The package's layers, enforced on the source: every import of every file, function-local ones
included, parsed with `ast` (nothing is imported, so an inversion hidden inside a function is seen).

    cli       kttune/cli/        parse, call the facade, render        (typer, rich)
                 |  imports app and emit only (and base)
    app       kttune/app/  kttune/documents.py   the facade: one function per command
                 |  may import core, measure, emit; never the CLI
    emit      kttune/emit/       renders what it is handed             (rich, matplotlib)
                 |  core and base only: never app, cli or measure
    measure   probes/ = kttune.probes  --->  kernels/ = kttune.kernels      (torch, pynvml, kt-kernel)
              kttune/validate/ (the server side)  (never the reverse; never app, cli or emit)
                 |  ^ (the pipeline)           ^   (never the reverse)
                 v  |                          |
              kttune/runner/ (the path runner, the layerwise pipeline) --/
                 |   (uses the probes' common, ranks and inventory helpers, no micro-probe)
    core      calibration -> search -> cost -> memory -> spec   (optuna, numpy; no torch, no rendering)
              (comparisons,               \\-> hw ------/
               fits)            cost, hw -> calibration.entries (the typed calibration: imports no model package)
              sim; protocol (the measurement statistics: numpy/scipy, imports no other kttune package)
    base      units  config  errors  extras  paths  net  bounds  schema

An arrow is "may import". The core is spec, hw, memory, cost, search, sim, calibration, protocol
plus the base modules: it imports nothing above it. The rules are the table RULES; a new package
or rule is a new row. Known violations in files other people are changing are listed in ALLOWED
with their owner, to be emptied, never extended.
"""

from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Where the installed module names come from (pyproject's package-dir): probes/ and kernels/ install
# as kttune.probes and kttune.kernels.
PACKAGE_DIRS = {"kttune": "kttune", "probes": "kttune.probes", "kernels": "kttune.kernels"}
# Files outside the package, checked for the rules whose sources name them (tests may use torch).
SCRIPT_DIRS = ("tests", "benchmarks", "scripts")

BASE = (
    "kttune.units",
    "kttune.config",
    "kttune.errors",
    "kttune.extras",
    "kttune.paths",
    "kttune.net",
    "kttune.bounds",
    "kttune.schema",
)
CORE_PACKAGES = (
    "kttune.spec",
    "kttune.hw",
    "kttune.memory",
    "kttune.cost",
    "kttune.search",
    "kttune.sim",
    "kttune.calibration",
    "kttune.protocol",
)
CORE = (*CORE_PACKAGES, *BASE)
MEASURE = ("kttune.probes", "kttune.kernels", "kttune.runner")
SERVER = ("kttune.validate",)  # launching and measuring a real server; its pure parts (logs, plan) the core may read
FACADE = ("kttune.app", "kttune.documents")
CLI = ("kttune.cli",)
EMIT = ("kttune.emit",)
APP = (*CLI, *FACADE, *EMIT)  # everything above measure and the core
RENDERERS = ("rich", "matplotlib", "typer")


@dataclass(frozen=True)
class Rule:
    """Modules matching `sources` (but none of `except_sources`) import nothing matching `forbidden`
    (but `except_imports`). A pattern matches a module and its submodules; `*` is a glob."""

    name: str
    sources: tuple[str, ...]
    forbidden: tuple[str, ...]
    except_sources: tuple[str, ...] = ()
    except_imports: tuple[str, ...] = ()  # forbidden-looking imports the rule lets through


RULES = (
    Rule(
        "the model core measures nothing, renders nothing and needs no GPU stack",
        CORE,
        (*MEASURE, *SERVER, "torch", "triton", "pynvml", "kt_kernel", *RENDERERS, *APP),
        except_imports=("kttune.validate.logs", "kttune.validate.plan"),
    ),
    Rule(
        "spec is the bottom of the core",
        ("kttune.spec",),
        ("kttune.hw", "kttune.memory", "kttune.cost", "kttune.search", "kttune.sim", "kttune.calibration"),
    ),
    Rule(
        "hw holds data only (it reads the calibration's entry paths)",
        ("kttune.hw",),
        ("kttune.memory", "kttune.cost", "kttune.search", "kttune.sim", "kttune.calibration"),
        except_imports=("kttune.calibration.entries",),
    ),
    Rule(
        "memory is formulas over spec and config",
        ("kttune.memory",),
        ("kttune.hw", "kttune.cost", "kttune.search", "kttune.sim", "kttune.calibration"),
    ),
    Rule(
        "cost does not search or compare (it applies the calibration's entries)",
        ("kttune.cost",),
        ("kttune.search", "kttune.sim", "kttune.calibration"),
        except_imports=("kttune.calibration.entries",),
    ),
    Rule(
        "the typed calibration is data and its fit: it imports no model package",
        ("kttune.calibration.entries",),
        (
            "kttune.spec",
            "kttune.hw",
            "kttune.memory",
            "kttune.cost",
            "kttune.search",
            "kttune.sim",
            "kttune.calibration",
        ),
    ),
    Rule(
        "the comparisons and fits are not searched or simulated from",
        ("kttune.calibration",),
        ("kttune.search", "kttune.sim"),
    ),
    Rule(
        "the measurement protocol is statistics: it imports no other kttune package and never times",
        ("kttune.protocol",),
        (
            "kttune.spec",
            "kttune.hw",
            "kttune.memory",
            "kttune.cost",
            "kttune.search",
            "kttune.sim",
            "kttune.calibration",
            "kttune.config",
            "kttune.paths",
            "kttune.net",
            "kttune.app",
            "time",
            "subprocess",
        ),
    ),
    Rule("base modules import no kttune package", BASE, (*CORE_PACKAGES, *MEASURE, *APP)),
    Rule(
        "validation's pure parts read text and numbers only (the process and HTTP side is validate.server/run)",
        ("kttune.validate.logs", "kttune.validate.plan", "kttune.calibration.server"),
        (
            "kttune.probes",
            "kttune.kernels",
            "torch",
            "triton",
            "pynvml",
            "kt_kernel",
            *RENDERERS,
            *APP,
            "subprocess",
            "socket",
            "http",
        ),
    ),
    Rule("kernels never import probes", ("kttune.kernels",), ("kttune.probes", "kttune.runner")),
    Rule(
        "the path runner uses the probes' shared helpers, never a micro-probe",
        ("kttune.runner",),
        ("kttune.probes",),
        except_imports=("kttune.probes.common", "kttune.probes.ranks", "kttune.probes.inventory"),
    ),
    Rule(
        "the micro-probes use the runner's layerwise pipeline only (the pipeline probe times it)",
        ("kttune.probes",),
        ("kttune.runner",),
        except_imports=("kttune.runner.pipeline",),
    ),
    Rule("measuring code does not drive the app", (*MEASURE, *SERVER), APP),
    Rule(
        "the CLI imports the facade and emit only (and base): it parses, calls, renders",
        CLI,
        (*CORE_PACKAGES, *MEASURE, *SERVER, "torch", "triton", "pynvml", "kt_kernel", "optuna"),
    ),
    Rule("the facade never drives the CLI", FACADE, CLI),
    Rule(
        "emit renders what it is handed: never the facade, the CLI or what measures",
        EMIT,
        (*CLI, *FACADE[:1], *MEASURE, *SERVER),
    ),
    Rule("only emit and the CLI render", ("kttune", *MEASURE), ("rich", "matplotlib"), except_sources=(*CLI, *EMIT)),
    Rule(
        "probes/ and kernels/ are imported as kttune.probes / kttune.kernels only (a PyPI `kernels` exists)",
        ("*",),
        ("probes", "kernels"),
    ),
)

# (importing module, imported module): owner, why. Empty it when the owner's branch lands.
ALLOWED: dict[tuple[str, str], str] = {}


def _matches(module: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*")


def module_name(path: Path, root: Path = ROOT) -> str | None:
    """The name a file imports as: kttune/cost/fit.py -> kttune.cost.fit, probes/run.py ->
    kttune.probes.run, tests/x.py -> tests.x."""
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if parts[0] in PACKAGE_DIRS:
        return ".".join([PACKAGE_DIRS[parts[0]], *parts[1:]])
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool = False) -> list[tuple[str, int]]:
    """Every module `source` imports, with its line: `import a.b`, `from a import b` (as a and a.b,
    since b may be a submodule), relative imports resolved against `module`, and
    `importlib.import_module("...")` / `__import__("...")` with a constant name. Anywhere in the file."""
    found: list[tuple[str, int]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.append((mod, node.lineno))
            found += [(f"{mod}.{a.name}", node.lineno) for a in node.names if a.name != "*"]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                found.append((node.args[0].value, node.lineno))
    return found


def violations(sources: dict[str, tuple[str, str]], rules=RULES, allowed=ALLOWED) -> list[str]:
    """`sources`: module name -> (where, source text). One line per import that breaks a rule."""
    out = []
    for module, (where, text) in sorted(sources.items()):
        is_package = where.endswith("__init__.py")
        seen = set()  # one line per statement and rule (`from a import b` yields a and a.b)
        for imported, line in imports_of(text, module, is_package):
            for rule in rules:
                if not any(_matches(module, s) for s in rule.sources):
                    continue
                if any(_matches(module, s) for s in rule.except_sources):
                    continue
                if not any(_matches(imported, f) for f in rule.forbidden):
                    continue
                if any(_matches(imported, e) for e in rule.except_imports):
                    continue
                if any(module == src and _matches(imported, dst) for src, dst in allowed):
                    continue
                if (line, rule.name) not in seen:
                    seen.add((line, rule.name))
                    out.append(f"{where}:{line}: {module} imports {imported} ({rule.name})")
    return out


def repo_sources(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    files = [f for d in (*PACKAGE_DIRS, *SCRIPT_DIRS) for f in (root / d).rglob("*.py")]
    return {module_name(f, root): (str(f.relative_to(root)), f.read_text()) for f in files}


# ---- the tree ------------------------------------------------------------------------------------


def test_the_tree_keeps_its_layers():
    bad = violations(repo_sources())
    assert not bad, "layer violations:\n" + "\n".join(bad)


def test_every_allowed_violation_still_exists():
    """An allow-list entry whose import is gone must be removed, so the list only shrinks."""
    sources = repo_sources()
    for (src, dst), owner in ALLOWED.items():
        assert src in sources, f"{src} is gone: drop its ALLOWED entry ({owner})"
        assert any(_matches(i, dst) for i, _ in imports_of(sources[src][1], src)), (
            f"{src} no longer imports {dst}: drop its ALLOWED entry ({owner})"
        )


def test_the_core_is_found():
    """The checker looks at the real files: a renamed directory must not make it vacuous."""
    names = repo_sources()
    for pkg in (
        "kttune.spec",
        "kttune.hw",
        "kttune.memory",
        "kttune.cost",
        "kttune.search",
        "kttune.protocol",
        "kttune.calibration",
        "kttune.probes",
        "kttune.runner",
        "kttune.kernels",
        "kttune.emit",
        "kttune.app",
        "kttune.cli",
    ):
        assert sum(_matches(m, pkg) for m in names) >= 2, pkg


# ---- the checker fails where it must -------------------------------------------------------------


@pytest.mark.parametrize(
    "module, source, rule",
    [
        (
            "kttune.cost.components",
            "def f():\n    from kttune.probes.inventory import collect_inventory\n",
            "model core",
        ),
        ("kttune.hw.registry", "import torch\n", "model core"),
        ("kttune.search.pick", "def show():\n    from rich.table import Table\n", "model core"),
        ("kttune.protocol.stats", "import torch\n", "model core"),
        ("kttune.protocol.rounds", "from kttune.search.space import SearchSpace\n", "measurement protocol"),
        ("kttune.protocol.race", "import time\n", "measurement protocol"),
        ("kttune.memory.vram", "from kttune import probes\n", "model core"),
        ("kttune.spec.methods", "from ..cost import fit\n", "bottom of the core"),
        ("kttune.hw.profile", "from kttune.search.study import run_search\n", "hw holds data only"),
        ("kttune.kernels.int4", "from kttune.probes.gpu_common import fill_random_\n", "kernels never import probes"),
        (
            "kttune.kernels.int4",
            "import importlib\nimportlib.import_module('kttune.probes.run')\n",
            "kernels never import probes",
        ),
        ("kttune.probes.run", "import matplotlib.pyplot as plt\n", "only emit and the CLI render"),
        (
            "tests.cost.test_fit",
            "from probes.inventory import collect_inventory\n",
            "kttune.probes / kttune.kernels only",
        ),
        (
            "kttune.cli.search",
            "def f():\n    from kttune.search.study import run_search\n",
            "the CLI imports the facade",
        ),
        ("kttune.cli.probe", "from kttune.probes.run import run_probe\n", "the CLI imports the facade"),
        ("kttune.search.study", "from kttune.app import search\n", "model core"),
        ("kttune.sim.engine", "from kttune.cli.flags import FLAGS\n", "model core"),
        ("kttune.app.inputs", "from kttune.cli.flags import FLAGS\n", "the facade never drives the CLI"),
        ("kttune.emit.report", "from kttune.app.search_explain import search\n", "emit renders what it is handed"),
        ("kttune.emit.paths", "from kttune.runner.api import run_paths\n", "emit renders what it is handed"),
        ("kttune.app.search_explain", "from rich.table import Table\n", "only emit and the CLI render"),
        ("kttune.schema", "from kttune.hw.profile import PROFILE_FORMAT\n", "base modules"),
        ("kttune.probes.run", "from kttune.app import probe\n", "measuring code does not drive the app"),
        ("kttune.calibration.server", "import torch\n", "model core"),
        ("kttune.calibration.runner", "from kttune.runner.stack import attention_shape\n", "model core"),
        ("kttune.calibration.entries", "from kttune.cost.components import Components\n", "typed calibration"),
        ("kttune.cost.prefill", "from kttune.calibration.server import compare\n", "cost does not search or compare"),
        ("kttune.hw.profile", "from kttune.calibration.runner import forward_points\n", "hw holds data only"),
        ("kttune.runner.path_runner", "from kttune.probes.cpu_moe import shape_from_model\n", "never a micro-probe"),
        ("kttune.probes.gpu_suite", "from kttune.runner.session import RunnerSession\n", "pipeline only"),
        ("kttune.kernels.decoder", "from kttune.runner.pipeline import LayerPipeline\n", "kernels never import"),
    ],
)
def test_the_checker_catches_an_inverted_import(module, source, rule):
    bad = violations({module: (module.replace(".", "/") + ".py", source)})
    assert bad and all(rule in b for b in bad[:1]), bad


@pytest.mark.parametrize(
    "module, source",
    [
        ("kttune.search.study", "import optuna\nfrom kttune.cost.prefill import crossover_tokens\n"),
        ("kttune.probes.cpu_moe", "def f():\n    import torch\n    from kttune.kernels.kt_moe import build\n"),
        ("kttune.emit.report", "from rich.table import Table\nimport matplotlib\n"),
        (
            "kttune.cli.probe",
            "from rich.console import Console\nfrom kttune.app import probe\nfrom kttune.emit import report\n",
        ),
        (
            "kttune.app.probing",
            "from kttune.probes.run import run_probe\nfrom kttune.emit.progress import ProbeProgress\n",
        ),
        (
            "kttune.app.search_explain",
            "from kttune.search.study import run_search\nfrom kttune.errors import UserError\n",
        ),
        ("kttune.cost.components", "from kttune.memory.vram import kv_cell_bytes\n"),
        ("kttune.cost.components", "from kttune.calibration.entries import Calibration\n"),
        ("kttune.calibration.server", "from kttune.cost.prefill import prefill_forwards\n"),
        ("kttune.runner.path_runner", "import torch\nfrom kttune.runner.pipeline import LayerPipeline\n"),
        ("kttune.runner.tp", "from kttune.probes.ranks import run_ranks\n"),
        ("kttune.probes.gpu_pipeline", "from kttune.runner.pipeline import LayerPipeline\n"),
    ],
)
def test_the_checker_passes_allowed_imports(module, source):
    assert violations({module: (module.replace(".", "/") + ".py", source)}) == []


def test_the_checker_reads_a_file_on_disk(tmp_path):
    """The same path the tree check takes: a file written under kttune/cost/ that imports a probe
    inside a function is reported with its line."""
    (tmp_path / "kttune" / "cost").mkdir(parents=True)
    (tmp_path / "kttune" / "cost" / "bad.py").write_text("x = 1\n\ndef f():\n    import kttune.probes.inventory\n")
    bad = violations(repo_sources(tmp_path))
    assert bad == [
        "kttune/cost/bad.py:4: kttune.cost.bad imports kttune.probes.inventory "
        "(the model core measures nothing, renders nothing and needs no GPU stack)"
    ]


def test_the_allow_list_is_exact():
    """An entry excuses its own module only: the same import from another kernel still fails."""
    src = "from kttune.probes.gpu_common import fill_random_\n"
    allowed = {("kttune.kernels.expert_weights", "kttune.probes.gpu_common"): "example"}
    assert violations({"kttune.kernels.expert_weights": ("kernels/expert_weights.py", src)}, allowed=allowed) == []
    assert violations({"kttune.kernels.int4": ("kernels/int4.py", src)}, allowed=allowed)
