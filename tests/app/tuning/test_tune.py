"""`kttune tune` as a library call on the runner's CPU variant (small shapes, this CPU): the whole
flow end to end, Ctrl-C and resume, the budget; and its pure parts held to laws."""

from __future__ import annotations

from dataclasses import replace

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kttune.app.tuning import TuneRequest, run_tune
from kttune.app.tuning.run import profile_holds, resolve_evaluator, state_key, sweep_sizes

SHIPPED = "h200-pcie5-xeon-amx-16c"


@pytest.fixture()
def tiny(tmp_path):
    wl = tmp_path / "wl.json"
    wl.write_text(
        json.dumps({"prompt_tokens": [300, 700, 1500], "weights": [1, 1, 1], "output_tokens": 16, "concurrency": 1})
    )
    return dict(
        model="qwen3-30b-a3b",
        vram_bytes=32 * 2**30,
        workload=str(wl),
        evaluator="runner-cpu",
        profile=SHIPPED,
        chunks=(512, 1024),
        state_path=str(tmp_path / "state.json"),
        out_dir=str(tmp_path / "report"),
    )


def _kept_rounds(e) -> set[int]:
    """The rounds in which an estimate kept at least one sample (its outliers left out)."""
    bad = {o.index for o in e.outliers}
    return {r for i, r in enumerate(e.rounds) if i not in bad}


def test_tune_end_to_end_then_interrupted_and_resumed(tiny, tmp_path):
    """The whole flow on the CPU variant: a pick raced against runners-up and baselines with
    intervals, the crossover with its interval, a calibration, the output check, a launch command.
    Then the same request interrupted after a few samples (Ctrl-C in the progress callback) keeps
    them, and a rerun resumes instead of measuring them again."""
    res = run_tune(TuneRequest(**tiny))
    d = res.to_dict()
    assert res.mode == "measured" and res.evaluator == "runner-cpu"
    roles = [r.role for r in res.rows]
    assert roles.count("pick") == 1 and "baseline" in roles and "runner-up" in roles
    pick_row = next(r for r in res.rows if r.role == "pick")
    assert (
        pick_row.cfg == res.pick
        and pick_row.estimate.n >= 3
        and pick_row.estimate.low <= pick_row.estimate.median <= pick_row.estimate.high
    )
    for r in res.rows:
        if r.role != "pick" and r.estimate is not None and r.estimate.n >= 2:
            # measured in the same rounds: a paired ratio, unless outliers (left out) leave fewer
            # than two rounds where both kept a sample (then Welch's interval, named unpaired)
            shared = _kept_rounds(r.estimate) & _kept_rounds(pick_row.estimate)
            assert r.vs_pick is not None and r.vs_pick.paired == (len(shared) >= 2)
    assert {g.baseline for g in res.gains} <= {r.name for r in res.rows if r.role == "baseline"}
    # the check runs where layerwise can fire; a pick the race settled at threshold 0 (the CPU
    # variant's timings are noisy) has nothing to check (the check itself: test_session.py)
    assert res.check["agree"] and (res.check["checked"] or res.pick.gpu_prefill_token_threshold == 0)
    assert d["crossover"]["sizes"] and d["crossover"]["estimates"]
    assert {e["path"] for e in res.calibration} == {"hybrid", "layerwise"}
    assert "--kt-gpu-prefill-token-threshold" in res.argv and str(res.pick.chunked_prefill_size) in res.argv
    assert res.memory["worker_rss_bytes"] > 0 and not res.resumed
    again = run_tune(TuneRequest(**tiny))  # a finished run: answered from the state, nothing measured
    assert again.resumed and again.pick == res.pick and again.protocol["samples_this_run"] == 0

    tiny2 = dict(tiny, state_path=str(tmp_path / "s2.json"), seed=1)
    seen = []

    def interrupt(e):
        seen.append(e.done)
        if e.done >= 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_tune(TuneRequest(**tiny2), on_event=interrupt)
    saved = json.loads((tmp_path / "s2.json").read_text())
    saved_n = sum(len(v) for ph in saved["samples"].values() for v in ph.values())
    assert saved_n >= 7  # what was measured is kept
    resumed = run_tune(TuneRequest(**tiny2))
    after = json.loads((tmp_path / "s2.json").read_text())
    assert resumed.resumed
    # the kept samples are used, not measured again: the state still holds them as they were (how
    # many more the resumed run takes is the race's, which noise decides: not compared with another
    # run's count)
    for phase, items in saved["samples"].items():
        for item, vs in items.items():
            assert after["samples"][phase][item][: len(vs)] == vs


def test_a_budget_cuts_the_plan_and_says_so(tiny, tmp_path):
    res = run_tune(TuneRequest(**dict(tiny, budget_s=4.0, state_path=str(tmp_path / "b.json"))))
    assert res.stopped and "budget" in res.decision and res.pick is not None and res.argv


def test_without_a_gpu_the_model_answers_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("KTTUNE_CACHE_DIR", str(tmp_path))
    req = TuneRequest(model="qwen3-30b-a3b", vram_bytes=32 * 2**30, profile=SHIPPED)
    assert resolve_evaluator(req)[0] == "model"  # this machine has no CUDA
    res = run_tune(req)
    assert res.mode == "model" and not res.rows and "nothing was measured" in res.notes[0] and res.argv


@given(st.one_of(st.none(), st.floats(1, 1e5)), st.integers(32, 70000))
def test_sweep_sizes_stay_in_range(predicted, cap):
    s = sweep_sizes(predicted, cap)
    assert s == sorted(set(s)) and 1 <= len(s) <= 5
    assert all(32 <= x <= max(32, cap) and x % 32 == 0 or x == cap for x in s)
    if predicted and 64 <= predicted <= cap / 4 and cap >= 1024:
        assert s[0] <= predicted <= s[-1]  # the ladder brackets the predicted crossover


def test_the_state_key_follows_what_is_measured():
    a = TuneRequest(model="m", vram_bytes=1)
    assert state_key(a, "runner") == state_key(TuneRequest(model="m", vram_bytes=1, budget_s=60, fresh=True), "runner")
    assert state_key(a, "runner") != state_key(TuneRequest(model="m", vram_bytes=2), "runner")
    assert state_key(a, "runner") != state_key(a, "runner-cpu")


def test_a_profile_holds_only_on_its_own_machine_kind():
    from kttune.hw.registry import load_shipped

    p = load_shipped(SHIPPED)
    here = p.inventory
    other = replace(here, cpu=replace(here.cpu, physical_cores=here.cpu.physical_cores * 2))
    assert profile_holds(p, here, "BF16")[0]
    assert not profile_holds(p, other, "BF16")[0]
    assert not profile_holds(p, None, "BF16")[0]
    assert not profile_holds(p, here, "MXFP4")[0]  # no CPU MoE curves of that method
    # the same machine read with its CPUID numbers: the profile written before they were still holds
    assert profile_holds(p, replace(here, cpu=replace(here.cpu, family=6, model_number=207)), "BF16")[0]


def test_on_a_gpu_a_model_the_runner_cannot_run_is_answered_by_the_cost_model(monkeypatch):
    """Where CUDA is, tune measures with the path runner, except for what it cannot run: DeepSeek-V4
    (SGLang's compressed attention) and MXFP8 (no GPU GEMM of its scales in kttune); those get the
    cost model's answer and the reason. MXFP4 runs (docs/path-runner.md#mxfp4). The GPU is what is
    pretended here: this VM has none."""
    from kttune.app.tuning import run

    monkeypatch.setattr(run, "_has_cuda", lambda: True)
    gb = 48 * 2**30
    assert resolve_evaluator(TuneRequest(model="qwen3-30b-a3b", vram_bytes=gb))[0] == "runner"
    ev, why = resolve_evaluator(TuneRequest(model="deepseek-v4-flash", vram_bytes=gb))
    assert ev == "model" and "compressed sparse attention" in why
    assert resolve_evaluator(TuneRequest(model="gpt-oss-20b", vram_bytes=gb))[0] == "runner"
    ev, why = resolve_evaluator(TuneRequest(model="gpt-oss-20b", method="MXFP8", vram_bytes=gb))
    assert ev == "model" and "MXFP8" in why
