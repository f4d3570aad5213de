"""User-facing errors. The CLI turns a `UserError` into one line on stderr and exit code 2.

The library names parameters as Python knows them (`vram_bytes`, `gpus`), never as the command
line spells them: a message that mentions a parameter writes it as `{name}` and lists it in
`params`; `line()` then reads `gpus 0 must be at least 1`, and `named(spell)` gives the same error
with each parameter spelled by `spell` (kttune.cli.flags maps them to `--gpus`, once for every
command). Other text in a message is never touched, braces included.
"""

from __future__ import annotations

from typing import Callable, Iterable


def _spelled(text: str | None, params: Iterable[str], spell: Callable[[str], str]) -> str | None:
    if text is None:
        return None
    for p in params:
        text = text.replace("{" + p + "}", spell(p))
    return text


def _same(name: str) -> str:
    return name


class UserError(Exception):
    """Bad input: a one-line message that names the problem and the fix. Exit code 2.
    `params`: the parameters `problem` and `fix` name as `{param}` (see the module)."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None, *, params: Iterable[str] = ()) -> None:
        self.params = tuple(params)
        self._template = (problem, fix)
        self.problem = _spelled(problem, self.params, _same)
        self.fix = _spelled(fix, self.params, _same)
        super().__init__(self.line())

    def line(self) -> str:
        return f"{self.problem}; {self.fix}" if self.fix else self.problem

    def named(self, spell: Callable[[str], str]) -> "UserError":
        """The same error with each of its parameters written `spell(param)` (the CLI's flags)."""
        if not self.params:
            return self
        new = type(self).__new__(type(self))  # not copy.copy: subclasses take other arguments
        new.__dict__.update(self.__dict__)
        problem, fix = self._template
        new.problem, new.fix = _spelled(problem, self.params, spell), _spelled(fix, self.params, spell)
        new.args = (new.line(),)
        return new


class InfeasibleError(UserError):
    """The request is well-formed but nothing fits (e.g. the VRAM budget is too small): the
    answer is "no", not bad input. Exit code 1."""

    exit_code = 1


class ParameterError(UserError):
    """A bad value of one parameter: the message starts with its name, `{param} <problem>`, and
    `problem` and `fix` may name it and others (`also`) as `{name}`."""

    def __init__(self, param: str, problem: str, fix: str | None = None, also: Iterable[str] = ()) -> None:
        self.param = param
        super().__init__("{" + param + "} " + problem, fix, params=(param, *also))


def error_report(e: BaseException) -> tuple[str, str, str | None]:
    """What a child process sends its parent of error `e`: (type name, problem, fix); `reraise` in
    the parent raises it again."""
    return type(e).__name__, getattr(e, "problem", str(e)), getattr(e, "fix", None)


def reraise(kind: str, message: str, fix: str | None, who: str) -> None:
    """Raise, in a parent process, the error a child reported as (type name, problem, fix): a
    UserError or ValueError as itself, anything else as a RuntimeError naming `who` and the kind."""
    if kind == "UserError":
        raise UserError(message, fix)
    if kind == "ValueError":
        raise ValueError(message)
    raise RuntimeError(f"{who}: {kind}: {message}")
