"""The command line's side of kttune.bounds: an option whose value is checked against a `Bound`
when it is parsed (one line, exit 2, naming the flag) and whose `--help` states the range. A core
function that raises `InvalidValue` for one of its parameters is spelled as its flag by
kttune.cli.flags, like every error naming a parameter."""

from typing import Any, Callable, Optional

import typer

from kttune.bounds import Bound


def flag_of(param: Any) -> str:
    """The spelling a user sees: the option's first long name as declared (`--gpus`, not `-g`, nor
    the sglang spelling `--tp` declared after it)."""
    names = [n for n in getattr(param, "opts", ()) if n.startswith("--")] or list(getattr(param, "opts", ()))
    return names[0] if names else f"--{str(getattr(param, 'name', 'value')).replace('_', '-')}"


def range_help(help: str, rule: Bound) -> str:
    return f"{help.rstrip()} Range: {rule.describe()}."


def _checker(rule: Bound) -> Callable[..., Any]:
    def check(param: typer.CallbackParam, value: Optional[Any]) -> Optional[Any]:
        return None if value is None else rule.check(value, flag_of(param))

    check.rule = rule  # type: ignore[attr-defined]  # what tests and `--help` read back
    return check


def rule_of(param: Any) -> Optional[Bound]:
    """The Bound an option was declared with (`bounded`), or None."""
    return getattr(getattr(param, "callback", None), "rule", None)


def bounded(*names: str, rule: Bound, help: str, **kw: Any) -> Any:
    """`typer.Option(*names, help=...)` whose value must satisfy `rule`, for an `Annotated` option:
    `gpus: Annotated[int, bounded("--gpus", rule=bounds.GPUS, help="GPUs.")] = 1`."""
    return typer.Option(*names, help=range_help(help, rule), callback=_checker(rule), **kw)
