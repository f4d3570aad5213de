"""The optional parts of kttune: which module each needs, and how a user installs it (pyproject's
optional-dependencies). A command that needs one calls `require` before it does any work, so a
missing part is one line naming the install and exit 2, with nothing half-written;
`kttune.cli.common.run_app` turns any other import of a missing optional module into the same line.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from kttune.errors import UserError


@dataclass(frozen=True)
class OptionalPart:
    """One optional module: what it is called where users install it, and how they install it."""

    module: str  # the import name (top level)
    name: str  # what the user knows it as
    install: str  # the command that installs it


KT_KERNEL_INSTALL = "pip install --no-deps kt-kernel==0.7.2 && pip install 'kttune[kt]'"

OPTIONAL: dict[str, OptionalPart] = {
    o.module: o
    for o in (
        OptionalPart("matplotlib", "matplotlib", "pip install 'kttune[plot]'"),
        OptionalPart("torch", "torch", "pip install 'kttune[measure]' (or first the torch build for your CUDA)"),
        OptionalPart("scipy", "scipy", "pip install 'kttune[measure]'"),
        OptionalPart("triton", "Triton", "pip install 'kttune[measure]' (CUDA builds of torch bring it)"),
        # kt-kernel pins an old torch: installed without its dependencies, then the ones its import needs.
        OptionalPart("kt_kernel", "kt-kernel", KT_KERNEL_INSTALL),
    )
}


def missing(module: str, needed_for: str) -> UserError:
    """The one-line error for `module` (a key of OPTIONAL) missing where `needed_for` needs it."""
    o = OPTIONAL[module]
    return UserError(f"{needed_for} needs {o.name}, which is not installed", o.install)


def require(module: str, needed_for: str) -> None:
    """Import `module` (a key of OPTIONAL) or raise `missing(...)`. A module that is installed but
    fails to import for another reason raises as it is (that is not a missing extra)."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != module:
            raise
        raise missing(module, needed_for) from None


def missing_from(error: ModuleNotFoundError) -> UserError | None:
    """The error for an import of a missing optional module that reached the top (run_app), or None
    when `error` names something that is not optional (a kttune bug)."""
    top = (error.name or "").split(".")[0]
    if top not in OPTIONAL:
        return None
    return missing(top, "this command")
