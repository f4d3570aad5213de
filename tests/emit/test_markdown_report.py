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
    assert names == [
        "prefill.png",
        "vram.png",
        "pareto.png",
        "cpu-moe.png",
        "h2d.png",
        "pipeline.png",
        "calibration.png",
        "schedules.png",
    ]
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


SIMULATE_JSON = {  # the shape of `kttune simulate --json` (schema kttune.simulate/1), two schedules
    "schema": "kttune.simulate/1",
    "profile": "h200-pcie5-xeon-amx-16c",
    "slo": {"ttft_s": 5.0, "tbt_ms": 250.0},
    "schedules": [
        {
            "schedule": "chunked",
            "ttft_s": {"p50": 1.0, "p90": 4.0, "p99": 9.0},
            "tbt_ms": {"p50": 60.0, "p90": 200.0, "p99": 400.0},
            "samples": {
                "prompt_tokens": [100, 200, 300],
                "ttft_s": [0.5, 1.0, 9.0],
                "max_tbt_ms": [80.0, 300.0, 120.0],
            },
        },
        {
            "schedule": "layered",
            "ttft_s": {"p50": 1.2, "p90": 3.0, "p99": 4.0},
            "tbt_ms": {"p50": 55.0, "p90": 90.0, "p99": 120.0},
            "samples": None,
        },
    ],
    "capacity": [
        {
            "schedule": "chunked",
            "curve": [{"rate_per_s": 0.5, "attainment": 1.0}, {"rate_per_s": 1.0, "attainment": 0.6}],
        },
        {
            "schedule": "layered",
            "curve": [{"rate_per_s": 0.5, "attainment": 1.0}, {"rate_per_s": 1.0, "attainment": 0.9}],
        },
    ],
}


def test_simulate_json_adapts_to_the_schedule_figure():
    from kttune.emit import figures as F
    from .test_figures import lines_by_label, vlines

    sim = M.sim_result(SIMULATE_JSON)
    assert M.classify(SIMULATE_JSON) == "sim"
    fig = F.fig_schedules(sim)
    ax_ttft, ax_tbt, ax_att = fig.axes[:3]
    ttft = lines_by_label(ax_ttft)
    assert list(ttft["chunked"].get_xdata()) == [0.5, 1.0, 9.0]  # samples: an empirical CDF
    assert list(ttft["layered p50/p90/p99"].get_xdata()) == [1.2, 3.0, 4.0]  # percentiles only
    assert list(ttft["layered p50/p90/p99"].get_ydata()) == pytest.approx([0.5, 0.9, 0.99])
    tbt = lines_by_label(ax_tbt)
    assert list(tbt["chunked"].get_xdata()) == pytest.approx([80.0, 120.0, 300.0])
    assert list(tbt["layered p50/p90/p99"].get_xdata()) == pytest.approx([55.0, 90.0, 120.0])
    assert "longest gap per request" in ax_tbt.get_xlabel()
    att = lines_by_label(ax_att)
    assert list(att["layered"].get_ydata()) == [1.0, 0.9]
    assert vlines(ax_tbt)["TBT SLO"] == pytest.approx(250.0)
    assert "h200-pcie5-xeon-amx-16c" in F.provenance_of(fig)
