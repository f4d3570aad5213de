"""`kttune tune` times the model's attention block where the profile it reuses lacks it (the cost
model's per-layer fixed cost; without it the model borrows another model's). The real block probe
runs on the CPU here, through the probe registry, as it runs on CUDA on the box; only the "is there
CUDA" answers are forced, and the probe is sent to the CPU device."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

pytest.importorskip("torch")

from kttune.app.inputs import this_machine_inventory  # noqa: E402
from kttune.app.tuning import TuneRequest  # noqa: E402
from kttune.app.tuning import run as tune_run  # noqa: E402
from kttune.hw.fingerprint import fingerprint  # noqa: E402
from kttune.hw.profile import curve_key, load_profile, save_profile  # noqa: E402
from kttune.hw.registry import load_shipped  # noqa: E402
from kttune.paths import profile_cache_path  # noqa: E402
from kttune.probes import gpu_attention  # noqa: E402
from kttune.probes import run as probe_run  # noqa: E402
from kttune.runner.stack import small_spec  # noqa: E402

SHIPPED = "h200-pcie5-xeon-amx-16c"
TINY = "qwen3-30b-a3b-tiny"  # a block no profile holds


@pytest.fixture()
def cuda_on_cpu(monkeypatch):
    """Tune and the probe registry believe there is CUDA; the block probe runs on the CPU."""
    monkeypatch.setattr(tune_run, "_has_cuda", lambda: True)
    monkeypatch.setattr(probe_run, "_cuda_available", lambda: True)
    real = gpu_attention.probe_attention_block
    monkeypatch.setattr(gpu_attention, "probe_attention_block", functools.partial(real, device="cpu", repeats=2))


def _request() -> TuneRequest:
    return TuneRequest(model="qwen3-30b-a3b", vram_bytes=32 * 2**30, evaluator="runner")


def _tiny_inputs(req: TuneRequest):
    """The request's inputs with a small model of a name no profile has a block curve of."""
    inp = tune_run._inputs(req)
    spec = replace(small_spec(inp.request.model), name=TINY)
    return replace(inp, request=replace(inp.request, model=spec))


def _cache_this_machine() -> str:
    """The shipped profile cached as this machine's own probe (its fingerprint), as `kttune probe`
    leaves it: tune's profile step then holds it."""
    fp = fingerprint(this_machine_inventory())
    save_profile(replace(load_shipped(SHIPPED), fingerprint=fp), profile_cache_path(fp))
    return fp


def test_a_reused_profile_gets_the_models_block_once_and_keeps_every_other_curve(cuda_on_cpu):
    fp = _cache_this_machine()
    before = load_profile(profile_cache_path(fp))
    req = _request()
    inp = _tiny_inputs(req)
    assert not tune_run.block_measured(inp.request.profile, TINY)
    _, info = tune_run._profile_step(req, inp, False, tune_run._Progress(None))
    assert info["action"] == "reused"
    block = info["attention_block"]
    assert block["model"] == TINY and block["curves"] == 1 and "cached" in block["into"]
    after = load_profile(profile_cache_path(fp))
    new = [c for c in after.curves_of("attention_block") if c.params.get("model") == TINY]
    assert len(new) == 1 and [p.x for p in new[0].points] == list(gpu_attention.BLOCK_TOKENS_QUICK)
    assert all(p.t_ms > 0 for p in new[0].points)
    # every curve of the cache is still there, the block added to them
    assert {curve_key(c) for c in before.curves} <= {curve_key(c) for c in after.curves}
    assert len(after.curves) == len(before.curves) + 1
    # the next tune finds it and does not time it again
    _, again = tune_run._profile_step(req, _tiny_inputs(req), False, tune_run._Progress(None))
    assert again["action"] == "reused" and "attention_block" not in again


def test_without_a_cache_the_block_goes_into_this_runs_copy_only(cuda_on_cpu):
    req = _request()
    inp = _tiny_inputs(req)
    shipped_curves = len(inp.request.profile.curves)
    out, info = tune_run._probe_attention_block(req, inp, this_machine_inventory(), tune_run._Progress(None))
    assert info["curves"] == 1 and "this run's copy" in info["into"]
    prof = out.request.profile
    assert tune_run.block_measured(prof, TINY) and len(prof.curves) == shipped_curves + 1
    assert any("not cached" in n for n in prof.provenance.notes)
    assert not profile_cache_path(fingerprint(this_machine_inventory())).exists()


def test_the_small_cpu_variant_and_a_machine_without_cuda_time_no_block(monkeypatch):
    _cache_this_machine()
    req = _request()
    for small, cuda in ((True, True), (False, False)):
        monkeypatch.setattr(tune_run, "_has_cuda", lambda cuda=cuda: cuda)
        _, info = tune_run._profile_step(req, _tiny_inputs(req), small, tune_run._Progress(None))
        assert info["action"] == "reused" and "attention_block" not in info
