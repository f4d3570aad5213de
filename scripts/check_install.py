"""Check an installed kttune (a wheel in a fresh venv, not the editable checkout): it holds every
module and data file of the source tree and nothing else, and every module imports from
site-packages. `.ci/run` runs it from a directory outside the source tree:

    python scripts/check_install.py --source REPO             # torch installed: every module imports
    python scripts/check_install.py --source REPO --no-torch  # torch absent: all but the measure
                                                              # layer import (none needs torch)

Exit 0 when all holds; else one line per problem and exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from pathlib import Path

# Source directory -> installed package (setup.py's mapping).
INSTALLED_AS = {
    "kttune": "kttune",
    "probes": "kttune.probes",
    "kernels": "kttune.kernels",
    "profiles": "kttune.profiles",
}
# The measure layer (tests/test_import_boundaries.py): the only packages that may need torch.
NEEDS_TORCH = ("kttune.probes", "kttune.kernels", "kttune.runner")


def _files(root: Path) -> set[str]:
    return {
        str(f.relative_to(root))
        for f in root.rglob("*")
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc"
    }


def source_files(repo: Path) -> set[str]:
    """Every file of the source tree as it lands in site-packages (kttune/probes/x.py for probes/x.py)."""
    out = set()
    for src, pkg in INSTALLED_AS.items():
        prefix = Path(*pkg.split("."))
        out |= {str(prefix / f) for f in _files(repo / src)}
    return out


def installed_files(site_root: Path) -> set[str]:
    return {str(Path("kttune") / f) for f in _files(site_root / "kttune")}


def module_names(files: set[str]) -> list[str]:
    mods = []
    for f in sorted(files):
        if f.endswith(".py"):
            parts = Path(f[:-3]).parts
            mods.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return mods


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True, help="the source tree the wheel was built from")
    ap.add_argument("--no-torch", action="store_true", help="torch is not installed: check the core needs none")
    args = ap.parse_args(argv)
    repo = args.source.resolve()
    problems: list[str] = []

    import kttune

    site_root = Path(kttune.__file__).resolve().parents[1]
    if repo in Path(kttune.__file__).resolve().parents:
        print(
            f"kttune imports from the source tree ({kttune.__file__}), not an installed copy: run this "
            "from a directory outside it, with the venv the wheel went into"
        )
        return 1
    have, want = installed_files(site_root), source_files(repo)
    problems += [f"missing from the install: {f}" for f in sorted(want - have)]
    problems += [f"installed but not in the source tree: {f}" for f in sorted(have - want)]

    imported = 0
    for mod in module_names(have):
        try:
            importlib.import_module(mod)
            imported += 1
        except ModuleNotFoundError as e:
            if args.no_torch and e.name and e.name.split(".")[0] == "torch" and mod.startswith(NEEDS_TORCH):
                continue  # the measure layer needs torch (the `measure` extra)
            problems.append(f"import {mod}: {type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 -- report every module, not the first failure
            problems.append(
                f"import {mod}: {type(e).__name__}: {e} ({traceback.extract_tb(e.__traceback__)[-1].filename})"
            )
    for p in problems:
        print(p)
    print(
        f"check_install: {len(have)} files under {site_root / 'kttune'}, {imported} modules imported"
        f"{' (torch absent)' if args.no_torch else ''}; {len(problems)} problem(s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
