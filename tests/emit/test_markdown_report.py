"""The Markdown report: every figure it names exists as a PNG, captions carry provenance, the study
is named with the optuna-dashboard command, and saved documents rebuild the same report."""

from __future__ import annotations

import json
import re

import optuna
import pytest

from kttune.emit import markdown_report as M
from kttune.errors import UserError
from kttune.hw.profile import profile_to_dict
from kttune.hw.registry import load_shipped

from .test_figures import MEASURED, RUNS, SIM, kimi  # noqa: F401  (kimi is a fixture)


def images(md: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)


def test_report_of_a_search_profile_runner_and_simulation(kimi, tmp_path):  # noqa: F811
    from matplotlib.image import imread

    prof = profile_to_dict(load_shipped(MEASURED))
    inp = M.ReportInputs(results=[kimi], profiles=[prof], runs=list(RUNS), sims=[SIM])
    w = M.write_report(tmp_path / "r", inp, save_documents=True)
    md = w.markdown.read_text()
    names = images(md)
    assert names == [f.path.name for f in w.figures]
    assert names == ["prefill.png", "vram.png", "pareto.png", "cpu-moe.png", "h2d.png", "pipeline.png",
                     "calibration.png", "schedules.png"]
    for f in w.figures:
        img = imread(f.path)
        assert img.ndim == 3 and img.shape[0] > 200
        assert f.provenance and f.provenance in md  # the caption repeats the figure's provenance
    st = kimi["study"]
    assert f"`{st['name']}`" in md and f"optuna-dashboard {st['storage']}" in md
    assert "--kt-gpu-prefill-token-threshold" in md
    # the saved documents rebuild the same figures
    again = M.write_report(tmp_path / "again", M.read_inputs([tmp_path / "r"]))
    assert [f.path.name for f in again.figures] == names
    assert [f.provenance for f in again.figures] == [f.provenance for f in w.figures]


@pytest.mark.filterwarnings("ignore:JournalFileStorage has been deprecated")
def test_study_opens_from_its_storage_as_optuna_dashboard_opens_it(kimi):  # noqa: F811
    """optuna-dashboard opens a journal file with optuna's own JournalFileStorage: the study named in
    the report loads that way, unchanged, with its two objectives and every trial."""
    from optuna.storages import JournalFileStorage, JournalStorage

    st = kimi["study"]
    storage = JournalStorage(JournalFileStorage(st["storage"]))
    study = optuna.load_study(study_name=st["name"], storage=storage)
    assert len(study.directions) == 2
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == st["trials"]


def test_classify_and_bad_input(tmp_path, kimi):  # noqa: F811
    assert M.classify(kimi) == "search"
    assert M.classify(profile_to_dict(load_shipped(MEASURED))) == "profile"
    assert M.classify({"runs": RUNS}) == "runner" and M.classify(RUNS) == "runner"
    assert M.classify(SIM) == "sim"
    assert M.classify({"something": 1}) is None
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        M.read_inputs([bad])
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"a": 1}))
    with pytest.raises(UserError, match="no kttune result"):
        M.read_inputs([other])
    with pytest.raises(UserError, match="does not exist"):
        M.read_inputs([tmp_path / "missing.json"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no JSON documents"):
        M.read_inputs([tmp_path / "empty"])
