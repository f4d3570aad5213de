"""kttune.search.storage: `:memory:` is decided once, here, for every caller (the model search, the
measured search); the in-memory SQLite forms stay refused."""

from __future__ import annotations

import os

import optuna
import pytest

from kttune.errors import UserError
from kttune.search.measured import MeasuredRequest, ModelEvaluator, run_measured_search
from kttune.search.storage import IN_MEMORY_NOTE, open_storage
from kttune.search.study import StudyOptions, run_search
from tests.search.test_measured import base, comp_of


def test_memory_opens_optunas_in_memory_storage_with_a_note(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b = open_storage(":memory:"), open_storage(":memory:")
    assert isinstance(a.storage, optuna.storages.InMemoryStorage) and a.url == ":memory:"
    assert a.notes == (IN_MEMORY_NOTE,)
    assert a.storage is not b.storage  # each call a fresh, empty store
    assert list(tmp_path.iterdir()) == []  # no file named ":memory:" (nor its lock) in the working directory


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:", "sqlite:///file:x?mode=memory&uri=true"])
def test_in_memory_sqlite_is_still_refused_and_the_fix_names_memory(url):
    with pytest.raises(UserError) as e:
        open_storage(url)
    assert "in-memory" in str(e.value) and ":memory:" in e.value.fix


@pytest.mark.parametrize("almost", ["./:memory:", ":memory:.journal"])
def test_only_the_exact_name_is_special(tmp_path, monkeypatch, almost):
    monkeypatch.chdir(tmp_path)
    opened = open_storage(almost)
    assert isinstance(opened.storage, optuna.storages.JournalStorage) and (tmp_path / almost).is_file()


def test_the_model_search_and_the_measured_search_treat_memory_alike(tmp_path, monkeypatch):
    """Both searches run on `:memory:`, write no file and carry the note once."""
    monkeypatch.chdir(tmp_path)
    b = base()
    model_res = run_search(b, StudyOptions(trials=30, seed=3, storage=":memory:"))
    assert model_res.storage == ":memory:" and model_res.notes.count(IN_MEMORY_NOTE) == 1
    res = run_measured_search(
        MeasuredRequest(base=b, trials=3, seed=3, storage=":memory:", model_prefill_trials=20),
        ModelEvaluator(comp_of(b)),
        model_res,
    )
    assert res.storage == ":memory:" and res.notes.count(IN_MEMORY_NOTE) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_ctrl_c_inside_the_journal_lock_s_bookkeeping_is_held_until_it_is_done():
    """SIGINT raised while the lock is taken or given back arrives on leaving that step, never
    between the flock and the descriptor recorded beside it."""
    import signal

    from kttune.search.storage import _interrupts_held

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever earlier tests left
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt):
            with _interrupts_held():
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):  # bytecodes where Python would have raised it
                    pass
                reached.append("end of the step")
        assert reached == ["end of the step"]
        # and the handler is the one from before, interrupted or not
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with _interrupts_held():
            pass
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_lock_its_object_holds_is_taken_again_at_once_and_freed_by_one_release(tmp_path):
    """An interrupt that ends acquire() after the flock leaves the lock with its object: the next
    acquire() (the interrupted search's cleanup writing the journal) must not wait on itself, and
    the release after it frees the lock for another process's descriptor."""
    import fcntl

    from kttune.search.storage import FlockLock

    journal = str(tmp_path / "s.journal")
    lock = FlockLock(journal)
    assert lock.acquire() and lock.acquire()  # would block for ever on a second descriptor
    lock.release()
    other = os.open(journal + ".flock", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: raises BlockingIOError if still held
    finally:
        os.close(other)
