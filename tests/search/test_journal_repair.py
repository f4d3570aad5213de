"""Journal repair keeps every valid record (kttune.search.journal_lines, kttune.search.storage):
a bad line anywhere in a real Optuna journal is set aside with its byte offset, every record
before and after it stays, and a newer Optuna's record is refused with the file untouched."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import optuna
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kttune.cli import main
from kttune.errors import UserError
from kttune.search.journal_lines import scan_journal, split_lines
from kttune.search.measured import MeasuredRequest, ModelEvaluator, run_measured_search
from kttune.search.storage import open_storage
from kttune.search.study import StudyOptions, run_search
from tests.helpers import set_aside
from tests.search.test_measured import base, comp_of

SEARCH = ["search", "-m", "qwen3-30b-a3b", "--vram", "32G", "--profile", "h200-pcie5-xeon-amx-16c", "--seed", "3"]
GARBAGE = b"\x00\x00 not a record: a stray write from something else \xff\n"


@functools.lru_cache(maxsize=None)
def model_journal_bytes(trials: int) -> bytes:
    """A real journal of the model search (`trials` finished trials, one record each)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        j = Path(d) / "s.journal"
        run_search(base(), StudyOptions(trials=trials, seed=3, storage=str(j)))
        return j.read_bytes()


@functools.lru_cache(maxsize=None)
def measured_journal_bytes() -> bytes:
    """A real journal of a measured search: its trials are many records each (creation, params,
    intermediate values, attributes, state), so later records refer to trials by number."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        j, b = Path(d) / "m.journal", base()
        model_res = run_search(b, StudyOptions(trials=40, seed=3, storage=":memory:"))
        run_measured_search(
            MeasuredRequest(base=b, trials=6, seed=3, storage=str(j), model_prefill_trials=20),
            ModelEvaluator(comp_of(b)),
            model_res,
        )
        return j.read_bytes()


def trials_of(journal: Path) -> dict[str, list[tuple]]:
    """Every study's trials as Optuna replays them: (number, state, params, values, user attrs)."""
    store = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    out = {}
    for s in optuna.get_all_study_summaries(store):
        trials = optuna.load_study(study_name=s.study_name, storage=store).trials
        out[s.study_name] = [(t.number, t.state, t.params, t.values, t.user_attrs) for t in trials]
    return out


def insert(data: bytes, at_lines: list[int], lines: list[bytes]) -> tuple[bytes, list[tuple[int, bytes]]]:
    """`data` with `lines[i]` inserted before its line `at_lines[i]`; also (offset, line) of each
    inserted line in the result, as a repair must report them."""
    recs = [line for _, line in split_lines(data)]
    plan = sorted(zip(at_lines, range(len(lines))))
    out, where, prev = bytearray(), [], 0
    for at, i in plan:
        chunk = b"".join(recs[prev:at])
        out += chunk
        where.append((len(out), lines[i]))
        out += lines[i]
        prev = at
    out += b"".join(recs[prev:])
    return bytes(out), where


def test_a_garbage_line_in_the_middle_of_a_300_trial_journal_keeps_every_trial(tmp_path, capsys):
    """The case of issue 23: before, the journal was cut at the garbage, half the trials moved to
    a side file and the rerun ran them again. Now the rerun finds all 300 and runs none."""
    j = tmp_path / "s.journal"
    assert main(SEARCH + ["--trials", "300", "--storage", str(j)]) == 0
    intact = j.read_bytes()
    n = len(split_lines(intact))
    damaged, [(offset, _)] = insert(intact, [n // 2], [GARBAGE])
    j.write_bytes(damaged)
    capsys.readouterr()
    assert main(SEARCH + ["--trials", "300", "--storage", str(j), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["study"]["trials"] == 300 and out["study"]["new_trials"] == 0  # nothing re-run
    (note,) = [x for x in out["notes"] if "not an Optuna record" in x]
    assert f"byte {offset}: not JSON" in note and f"kept all {n} records before and after" in note
    assert "interrupted" not in note  # the note says what it found, not a guess
    assert set_aside(note) == [(offset, GARBAGE)]
    assert j.read_bytes().startswith(intact)  # what it was before the garbage (then the rerun's one record)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10_000), st.binary(max_size=60).filter(lambda b: b"\n" not in b).map(lambda b: b + b"\n")
        ),
        min_size=1,
        max_size=6,
    )
)
def test_inserted_bad_lines_are_set_aside_exactly_and_every_record_stays(insertions):
    """Law: whatever lines that are not records are inserted wherever in a real journal (the first
    line included), the scan keeps exactly the original records and sets aside exactly the
    inserted lines, at the offsets they have in the damaged file."""
    intact = model_journal_bytes(30)
    n = len(split_lines(intact))
    damaged, where = insert(intact, [at % (n + 1) for at, _ in insertions], [line for _, line in insertions])
    scan = scan_journal(damaged)
    assert scan.unknown is None and scan.forward_ref_at is None
    assert b"".join(scan.kept) == intact
    assert [(b.offset, b.data) for b in scan.bad] == where


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.01, 0.99))
def test_a_torn_record_with_a_whole_one_appended_loses_only_the_torn_one(which, cut):
    """What a crash mid-append followed by a later append leaves: the torn bytes set aside, the
    record appended after them kept."""
    intact = model_journal_bytes(30)
    lines = [line for _, line in split_lines(intact)]
    i = which % (len(lines) - 1)
    torn = lines[i][: max(1, int(len(lines[i]) * cut))].rstrip(b"\n")
    damaged = b"".join(lines[:i]) + torn + b"".join(lines[i + 1 :])
    scan = scan_journal(damaged)
    assert b"".join(scan.kept) == b"".join(lines[:i] + lines[i + 1 :])
    assert [(b.offset, b.data) for b in scan.bad] == [(len(b"".join(lines[:i])), torn)]


def test_a_lost_record_of_a_measured_trial_leaves_the_other_trials_as_they_were(tmp_path):
    """A record that is not a creation (a trial's attribute, say) overwritten by garbage: only
    that record is lost; every other trial replays as it did."""
    intact = measured_journal_bytes()
    lines = [line for _, line in split_lines(intact)]
    i = next(k for k in range(len(lines) // 2, len(lines)) if json.loads(lines[k])["op_code"] == 8)  # a user attr
    lost = json.loads(lines[i])
    j = tmp_path / "m.journal"
    j.write_bytes(intact)
    before = trials_of(j)
    j.write_bytes(b"".join(lines[:i]) + GARBAGE + b"".join(lines[i + 1 :]))
    (note,) = open_storage(str(j)).notes
    assert "set aside 1 line" in note and set_aside(note) == [(len(b"".join(lines[:i])), GARBAGE)]
    after = trials_of(j)
    assert after.keys() == before.keys()
    for name in before:
        changed = [(b, a) for b, a in zip(before[name], after[name]) if b != a]
        assert len(after[name]) == len(before[name]) and len(changed) <= 1
        for b, a in changed:  # the one trial that lost the attribute, and nothing else
            assert a[4] == {k: v for k, v in b[4].items() if k not in lost["user_attr"]} and a[:4] == b[:4]


def test_a_lost_trial_creation_keeps_the_records_before_it_and_no_trial_gets_anothers_data(tmp_path):
    """A CREATE_TRIAL overwritten by garbage would shift the number of every later trial, and the
    later records would land on the wrong trials; the repair sees the reference to a trial the
    journal no longer has and resumes from the records before the bad line."""
    intact = measured_journal_bytes()
    lines = [line for _, line in split_lines(intact)]
    creations = [k for k, line in enumerate(lines) if json.loads(line)["op_code"] == 4]
    i = creations[len(creations) // 2]
    j = tmp_path / "m.journal"
    j.write_bytes(intact)
    before = trials_of(j)
    j.write_bytes(b"".join(lines[:i]) + GARBAGE + b"".join(lines[i + 1 :]))
    (note,) = open_storage(str(j)).notes
    assert f"line at byte {len(b''.join(lines[:i]))} is not an Optuna record" in note and "creation" in note
    assert j.read_bytes() == b"".join(lines[:i])
    [(offset, kept)] = set_aside(note)
    assert offset == len(b"".join(lines[:i])) and kept == GARBAGE + b"".join(lines[i + 1 :])  # nothing thrown away
    after = trials_of(j)
    for name, trials in after.items():
        finished = [t for t in trials if t[1].is_finished()]
        assert all(t in before[name] for t in finished)  # each finished trial is one of the originals, whole


@pytest.mark.parametrize("where", ["middle", "end", "with a torn tail"])
def test_a_newer_optunas_record_is_refused_and_the_file_left_untouched(tmp_path, capsys, where):
    intact = model_journal_bytes(30)
    lines = [line for _, line in split_lines(intact)]
    newer = json.dumps({"op_code": 99, "worker_id": "a-newer-optuna", "trial_id": 3}).encode() + b"\n"
    if where == "middle":
        data = b"".join(lines[:10]) + newer + b"".join(lines[10:])
    else:
        data = intact + newer + (b'{"op_code": 5, "work' if where == "with a torn tail" else b"")
    j = tmp_path / "s.journal"
    j.write_bytes(data)
    with pytest.raises(UserError) as e:
        open_storage(str(j))
    assert "newer Optuna" in str(e.value) and "op code 99" in str(e.value)
    assert f"at byte {data.index(newer)}" in str(e.value)
    code = main(SEARCH + ["--trials", "30", "--storage", str(j)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "newer Optuna" in err and "Traceback" not in err
    assert j.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == ["s.journal", "s.journal.flock"]


@pytest.mark.parametrize(
    "record",
    [
        b'{"op_code": 5, "worker_id": "w"}\n',  # a known op code without its fields
        b'{"op_code": 6, "worker_id": "w", "trial_id": "x", "state": 1, "values": null}\n',
        b'{"op_code": -1, "worker_id": "w"}\n',
        b"[1, 2, 3]\n",
        b"\n",
    ],
)
def test_json_that_is_not_a_well_formed_record_is_set_aside_too(tmp_path, record):
    """Optuna's replay would fail on these (a KeyError, an exit 3 before): they are bad lines."""
    intact = model_journal_bytes(30)
    lines = [line for _, line in split_lines(intact)]
    j = tmp_path / "s.journal"
    j.write_bytes(b"".join(lines[:5]) + record + b"".join(lines[5:]))
    (note,) = open_storage(str(j)).notes
    assert set_aside(note) == [(len(b"".join(lines[:5])), record)] and j.read_bytes() == intact


def test_a_file_of_mostly_other_lines_is_still_refused_untouched(tmp_path):
    """One journal record pasted into someone's notes does not make them a journal."""
    one = split_lines(model_journal_bytes(30))[0][1]
    notes = tmp_path / "notes.txt"
    data = b"my notes\n" + one + b"more notes\nand more\n"
    notes.write_bytes(data)
    with pytest.raises(UserError) as e:
        open_storage(str(notes))
    assert "not an Optuna journal" in str(e.value) and notes.read_bytes() == data


def test_a_bad_first_line_of_a_journal_is_repaired_not_refused(tmp_path):
    intact = model_journal_bytes(30)
    j = tmp_path / "s.journal"
    j.write_bytes(GARBAGE + intact)
    (note,) = open_storage(str(j)).notes
    assert set_aside(note) == [(0, GARBAGE)] and j.read_bytes() == intact
