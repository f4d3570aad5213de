"""`kttune probe --repeat N` (kttune.app.probing.probe): real quick probes of this machine, back to
back, saved as their point-by-point median; a Ctrl-C after the first keeps what was measured."""

from __future__ import annotations

import json
import statistics

import pytest

from kttune.app.probing import probe
from kttune.cli import main
from kttune.hw.probe_median import LEFT_OUT_KEY, PROBES_KEY
from kttune.hw.profile import load_profile
from kttune.paths import profile_cache_path
from kttune.probes import run as probe_run
from kttune.probes.run import ProbeOptions

TINY = ["--quick", "--cpu-only", "--skip-host-ram", "--methods", "BF16", "--threads", "1", "--max-tokens", "4"]


@pytest.mark.kt
def test_repeat_saves_the_median_of_real_probes(tmp_path, capfd):
    out = tmp_path / "m.json"
    assert main(["probe", *TINY, "--fresh", "--repeat", "3", "--out", str(out), "--json"]) == 0
    printed = json.loads(capfd.readouterr().out)
    p = load_profile(out)
    assert printed["fingerprint"] == p.fingerprint and profile_cache_path(p.fingerprint).is_file()
    (moe,) = p.curves_of("cpu_moe")
    assert [pt.x for pt in moe.points] == [1, 4]
    for pt in list(moe.points) + [q for c in p.curves_of("stage_a_write") for q in c.points]:
        ts = [t["ms"] for t in pt.extra[PROBES_KEY]]
        kept = [t["ms"] for t in pt.extra[PROBES_KEY] if not t.get(LEFT_OUT_KEY)]  # named disturbed: left out
        assert len(ts) == 3 and kept and pt.t_ms == statistics.median(kept)
        assert pt.t_ms_p10 == min(kept) and pt.t_ms_p90 == max(kept)
    prov = p.provenance
    assert len(prov.sources) == 3 and any("median over those of the 3 probes" in n for n in prov.notes)


@pytest.mark.kt
def test_repeat_keeps_the_cached_curves_it_does_not_measure_once(tmp_path):
    base = dict(quick=True, threads=(1,), max_tokens=4, stage_a=False, host_ram=False, gpu=False)
    probe(ProbeOptions(methods=("RAWINT4",), merge_cached=False, **base))
    p = probe(ProbeOptions(methods=("BF16",), **base), repeat=2).profile
    by_method = {c.params["method"]: c for c in p.curves_of("cpu_moe")}
    assert sorted(by_method) == ["BF16", "RAWINT4"]
    assert all(PROBES_KEY in pt.extra for pt in by_method["BF16"].points)
    assert not any(PROBES_KEY in pt.extra for pt in by_method["RAWINT4"].points)  # the cached curve, as it was
    assert any("kept 1 curves" in n for n in p.provenance.notes)


@pytest.mark.kt
def test_ctrl_c_after_the_first_probe_saves_what_was_measured(tmp_path, monkeypatch):
    """Ctrl-C while the second of three probes runs: the first probe's profile is saved (to --out
    and the cache), says it was interrupted, and the interrupt goes on to the caller (exit 130)."""
    real = probe_run.run_probe
    calls = []

    def second_interrupted(options, reporter=None):
        calls.append(options)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(options, reporter)

    monkeypatch.setattr(probe_run, "run_probe", second_interrupted)
    out = tmp_path / "p.json"
    opts = ProbeOptions(
        quick=True, methods=("BF16",), threads=(1,), max_tokens=4, stage_a=False, host_ram=False, gpu=False, out=out
    )
    with pytest.raises(KeyboardInterrupt):
        probe(opts, repeat=3)
    p = load_profile(out)
    assert p.provenance.notes[0] == "interrupted after 1 of 3 probes"
    assert p.curves_of("cpu_moe") and load_profile(profile_cache_path(p.fingerprint)) == p
