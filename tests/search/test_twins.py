"""kttune.search.twins: of two trials with one configuration the smaller-numbered measures it,
and the other waits for its parameters to arrive before it decides."""

from __future__ import annotations

import collections
import multiprocessing as mp
import threading
import time

import optuna
import pytest

from kttune.search import twins
from kttune.search.measured import MeasuredRequest, ModelEvaluator, run_measured_search
from kttune.search.twins import earlier_twin
from tests.search.test_measured import base, comp_of, model_search

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # PartialFixedSampler
CFG = {"chunk": 8192, "threshold": 2048, "gpu_experts": 12}


CHOICES = {"chunk": [4096, 8192], "threshold": [0, 2048], "gpu_experts": [12, 13, 14]}


def _suggest(trial: optuna.Trial, params: dict) -> None:
    """Write `params` to the trial as a sampler would, one suggest (one storage write) each."""
    trial.study.sampler = optuna.samplers.PartialFixedSampler(params, optuna.samplers.RandomSampler())
    for k in params:
        trial.suggest_categorical(k, CHOICES[k])


def _start(study: optuna.Study, params: dict) -> optuna.Trial:
    trial = study.ask()
    _suggest(trial, params)
    return trial


@pytest.fixture
def study():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.create_study()


def test_a_smaller_trial_still_writing_its_parameters_is_waited_for(study):
    first = _start(study, {"chunk": 8192})  # its other parameters are on their way
    second = _start(study, CFG)

    def finish():
        time.sleep(0.1)
        _suggest(first, {k: CFG[k] for k in ("threshold", "gpu_experts")})

    threading.Thread(target=finish).start()
    assert earlier_twin(study, second.number, CFG).number == first.number


def test_the_larger_trial_never_gives_way_to_a_smaller_one_and_other_configurations_do_not_count(study):
    first = _start(study, CFG)
    other = _start(study, {**CFG, "gpu_experts": 13})
    assert earlier_twin(study, first.number, CFG) is None  # only smaller numbers count
    assert earlier_twin(study, other.number + 1, {**CFG, "gpu_experts": 14}) is None


def test_an_enqueued_trial_is_known_by_the_parameters_it_was_enqueued_with(study):
    study.enqueue_trial(CFG)  # number 0, WAITING: no params yet, only those it was enqueued with
    assert earlier_twin(study, 1, CFG).number == 0
    study.ask()  # 0 starts; its params are not suggested yet
    later = _start(study, CFG)
    assert earlier_twin(study, later.number, CFG).number == 0


def test_a_trial_whose_parameters_never_arrive_is_waited_for_once(study, monkeypatch):
    monkeypatch.setattr(twins, "STUCK_S", 0.2)
    dead = _start(study, {"chunk": 8192})  # its process died mid-suggest
    later = _start(study, CFG)
    stuck: set[int] = set()
    t0 = time.monotonic()
    assert earlier_twin(study, later.number, CFG, stuck) is None and stuck == {dead.number}
    waited = time.monotonic() - t0
    t0 = time.monotonic()
    assert earlier_twin(study, later.number, CFG, stuck) is None
    assert waited >= 0.2 and time.monotonic() - t0 < waited  # not waited for a second time


def _measure(storage: str, barrier) -> None:
    b = base()
    model_res = model_search(b, storage)
    barrier.wait()  # the four start their measured studies together
    run_measured_search(
        MeasuredRequest(base=b, trials=40, seed=3, storage=storage, model_prefill_trials=20),
        ModelEvaluator(comp_of(b)),
        model_res,
    )


def test_four_processes_on_one_journal_measure_no_configuration_twice(tmp_path):
    """Before the wait, this measured 2 configurations twice in 2 of 3 runs (pairs of trials with
    adjacent numbers started within 20 ms: the larger one looked while the smaller one's
    parameters were half written)."""
    storage = str(tmp_path / "s.journal")
    model_search(base(), storage)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_measure, args=(storage, barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
        assert p.exitcode == 0
    store = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(storage))
    (name,) = [
        s.study_name for s in optuna.get_all_study_summaries(store) if s.study_name.startswith("kttune-measured-")
    ]
    measured = [
        t
        for t in optuna.load_study(study_name=name, storage=store).trials
        if t.user_attrs.get("measured") and t.state.is_finished()
    ]
    assert 40 <= len(measured) <= 44
    twice = [c for c, n in collections.Counter(tuple(sorted(t.params.items())) for t in measured).items() if n > 1]
    assert twice == []
