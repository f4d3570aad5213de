"""Ctrl-C is exit 130 even when it lands inside a library's cleanup that then fails: Optuna 5.0's
`_run_trial` reads an unset local in its `finally` when the interrupt arrives during its tell, so
`kttune search` saw an UnboundLocalError (exit 3, 'this is a kttune bug') in one of two runs of
tests/cli/test_crash.py::test_sigint_exits_130_and_the_rerun_resumes on the loaded VM."""

from __future__ import annotations

from kttune.cli.common import EXIT_BUG, EXIT_INTERRUPTED, INTERRUPTED, run_app


def _read_unset_local() -> None:
    def f():
        return state  # noqa: F821 -- assigned below: an UnboundLocalError, as in Optuna's finally
        state = 0  # noqa: F841

    f()


def test_an_interrupt_that_a_cleanup_turns_into_another_error_exits_130(capsys):
    def app(**_):
        try:
            raise KeyboardInterrupt
        finally:
            _read_unset_local()

    assert run_app(app, []) == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip() == f"error: {INTERRUPTED}"


def test_the_same_error_without_an_interrupt_is_still_a_bug(capsys):
    def app(**_):
        _read_unset_local()

    assert run_app(app, []) == EXIT_BUG
    assert "UnboundLocalError" in capsys.readouterr().err
