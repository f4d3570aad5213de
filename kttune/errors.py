"""User-facing errors. The CLI turns a `UserError` into one line on stderr and exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """Bad input: a one-line message that names the problem and the fix. Exit code 2."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(self.line())

    def line(self) -> str:
        return f"{self.problem}; {self.fix}" if self.fix else self.problem


class InfeasibleError(UserError):
    """The request is well-formed but nothing fits (e.g. the VRAM budget is too small): the
    answer is "no", not bad input. Exit code 1."""

    exit_code = 1
