"""`kttune probe` end to end through the CLI: a real probe writes a profile that loads, to --out and
to the fingerprint cache; `kttune profile show` prints it; bad input exits 2 with one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kttune.cli import main
from kttune.hw.fingerprint import fingerprint
from kttune.hw.profile import load_profile
from kttune.paths import profile_cache_path
from kttune.probes.inventory import collect_inventory, usable_cores
from kttune.probes.run import (
    COLD_CPU_MOE_FLOOR_BYTES,
    ProbeOptions,
    cold_cpu_moe_options,
    cpu_moe_options,
    host_uptime_s,
    run_probe,
    thread_cliff_notes,
)


@pytest.fixture(scope="module")
def quick_profile(tmp_path_factory):
    """One real `kttune probe --quick --out FILE` (the full quick probe: about 30 s on 2 cores)."""
    import os

    tmp = tmp_path_factory.mktemp("probe")
    cache = tmp / "cache"
    old = os.environ.get("KTTUNE_CACHE_DIR")
    os.environ["KTTUNE_CACHE_DIR"] = str(cache)
    try:
        rc = main(["probe", "--quick", "--host-ram", "--out", str(tmp / "p.json")])
    finally:
        if old is None:
            os.environ.pop("KTTUNE_CACHE_DIR", None)
        else:
            os.environ["KTTUNE_CACHE_DIR"] = old
    return rc, tmp / "p.json", cache


@pytest.mark.kt
@pytest.mark.slow
def test_quick_probe_writes_a_valid_profile(quick_profile):
    import kt_kernel

    rc, out, cache = quick_profile
    assert rc == 0
    p = load_profile(out)
    assert p.provenance.kind == "measured"
    assert p.provenance.machine and "cores" in p.provenance.machine
    assert p.fingerprint == fingerprint(collect_inventory())
    assert (cache / "profiles" / f"{p.fingerprint}.json").is_file()
    moe = p.curves_of("cpu_moe")
    assert moe and all(c.backend == f"kt-kernel:{kt_kernel.__cpu_variant__}" for c in moe)
    cores = usable_cores(p.inventory.cpu)
    from kttune.probes.common import kt_thread_counts

    threads = kt_thread_counts(cores, quick=True)
    assert (
        {c.params["threads"] for c in moe}
        == set(threads)
        == {int(c.params["threads"]) for c in p.curves_of("stage_a_write")}
    )
    assert len(threads) == 2  # the quick search picks between two counts (on 2 cores: the cliff, 1 and 2)
    assert {c.params["method"] for c in moe} >= {"BF16", "FP8", "RAWINT4"}
    assert p.curves_of("stage_a_write")
    [hr] = p.curves_of("host_ram")  # one method in quick mode, at the quick shape
    assert [pt.x for pt in hr.points] == [256, 1024] and hr.params["experts"] == 32
    assert p.timer.resolution_ns and p.timer.resolution_ns > 0
    # the host's uptime at the start, from the real /proc/uptime: less than it is now
    assert 0 < p.provenance.host_uptime_s < host_uptime_s()


@pytest.mark.kt
@pytest.mark.slow
def test_profile_show_prints_tables_and_json(quick_profile, capsys):
    _, out, _ = quick_profile
    assert main(["profile", "show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "CPU MoE layer forward" in text and "Stage A" in text and "fingerprint" in text and "Host RAM" in text
    assert main(["profile", "show", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["format"] == "kttune-hardware-profile"


@pytest.mark.kt
def test_json_output_is_clean_and_cache_is_written(tmp_path, capfd):
    rc = main(
        [
            "probe",
            "--quick",
            "--host-ram",
            "--cpu-only",
            "--methods",
            "BF16",
            "--threads",
            "1",
            "--max-tokens",
            "4",
            "--json",
        ]
    )
    assert rc == 0
    out = capfd.readouterr().out  # file descriptor 1: kt-kernel's C++ printf must not land here
    d = json.loads(out)
    assert [c["params"]["method"] for c in d["curves"] if c["kind"] == "cpu_moe"] == ["BF16"]
    [hr] = [c for c in d["curves"] if c["kind"] == "host_ram"]  # the host RAM step runs, with the probe's method
    assert hr["params"]["method"] == "BF16" and [pt["x"] for pt in hr["points"]] == [256, 1024]
    assert profile_cache_path(d["fingerprint"]).is_file()


@pytest.mark.kt
def test_run_probe_options_without_cache(tmp_path):
    opts = ProbeOptions(
        quick=True,
        methods=("RAWINT4",),
        threads=(1,),
        max_tokens=4,
        stage_a=False,
        host_ram=True,
        out=tmp_path / "x.json",
        write_cache=False,
    )
    p = run_probe(opts)
    assert (tmp_path / "x.json").is_file()
    assert not profile_cache_path(p.fingerprint).exists()
    [c] = p.curves_of("cpu_moe")
    assert [pt.x for pt in c.points] == [1, 4]
    assert not p.curves_of("stage_a_write")
    # the host RAM step's curve lands in the written profile and loads back unchanged
    [hr] = p.curves_of("host_ram")
    assert load_profile(tmp_path / "x.json").curves_of("host_ram") == [hr]
    small, big = hr.points
    assert hr.params["method"] == "RAWINT4" and big.extra["reserved_bytes"] > small.extra["reserved_bytes"]
    skipped = run_probe(replace(opts, host_ram=False, out=None, merge_cached=False))
    assert not skipped.curves_of("host_ram")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["probe", "--threads", "0"], "--threads"),
        (["probe", "--threads", "x"], "--threads"),
        (["probe", "--methods", "NOPE", "--quick"], "NOPE"),
        (["probe", "--max-tokens", "0", "--quick"], "--max-tokens"),
        (["profile", "show", "/nonexistent/profile.json"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("error:") and needle in err[-1]


def test_thread_cliff_note():
    from kttune.hw.profile import Curve, Point

    def c(threads, t):
        return Curve(
            "cpu_moe",
            "tokens",
            (Point(1, t),),
            {"method": "AMXINT4", "threads": threads, "hidden": 7168, "inter": 2048, "experts": 384},
        )

    notes = thread_cliff_notes([c(16, 8.0), c(15, 0.3)], cores=16)
    assert len(notes) == 1 and "the driving thread starves" in notes[0] and "cliff starts at 16" in notes[0]
    assert thread_cliff_notes([c(16, 0.31), c(15, 0.3)], cores=16) == []
    # an SMT host of 16 cores and 32 logical CPUs: fine at the core count, over the cliff at kt run's 25
    smt = thread_cliff_notes([c(13, 0.3), c(15, 0.28), c(16, 0.35), c(25, 6.0), c(31, 9.0)], cores=16, logical=32)
    assert len(smt) == 1 and "cliff starts at 25" in smt[0] and "kt run's 0.8 x logical" in smt[0]


@pytest.mark.kt
def test_separate_runs_accumulate_in_the_cache(tmp_path):
    base = dict(quick=True, threads=(1,), max_tokens=4, stage_a=False, host_ram=False, gpu=False)
    first = run_probe(ProbeOptions(methods=("BF16",), **base))
    second = run_probe(ProbeOptions(methods=("RAWINT4",), **base))
    assert first.fingerprint == second.fingerprint
    assert sorted(c.params["method"] for c in second.curves_of("cpu_moe")) == ["BF16", "RAWINT4"]
    assert any("kept 1 curves" in n for n in second.provenance.notes)
    again = run_probe(ProbeOptions(methods=("RAWINT4",), **base))  # re-measured: replaced, not doubled
    assert sorted(c.params["method"] for c in again.curves_of("cpu_moe")) == ["BF16", "RAWINT4"]
    fresh = run_probe(ProbeOptions(methods=("RAWINT4",), merge_cached=False, **base))
    assert [c.params["method"] for c in fresh.curves_of("cpu_moe")] == ["RAWINT4"]
    assert load_profile(profile_cache_path(fresh.fingerprint)).curves_of("cpu_moe")[0].params["method"] == "RAWINT4"


@pytest.mark.kt
def test_skip_host_ram_leaves_the_step_out(capfd):
    rc = main(
        [
            "probe",
            "--quick",
            "--cpu-only",
            "--skip-host-ram",
            "--fresh",
            "--methods",
            "BF16",
            "--threads",
            "1",
            "--max-tokens",
            "1",
            "--json",
        ]
    )
    assert rc == 0
    kinds = {c["kind"] for c in json.loads(capfd.readouterr().out)["curves"]}
    assert "cpu_moe" in kinds and "host_ram" not in kinds


def test_host_uptime_reads_the_first_field_and_says_none_when_it_cannot(tmp_path):
    f = tmp_path / "uptime"
    f.write_text("66.80 1044.48\n")
    assert host_uptime_s(str(f)) == 66.8
    f.write_text("")
    assert host_uptime_s(str(f)) is None
    assert host_uptime_s(str(tmp_path / "absent")) is None
    assert host_uptime_s() > 0  # this machine's own


@pytest.mark.kt
def test_a_probe_without_the_shape_law_says_when_the_constants_came_from_another_cpu():
    """The CPU MoE step names `--shape-law` where this host's CPU is not a generation its kt-kernel
    build's shape-law constants were measured on (docs/probe.md#one-name-two-cpus): the real kernels
    timed on this machine, read as a host of another generation (Zen 5 for a Zen 4 build's constants,
    Sapphire Rapids for the AMX build's)."""
    from kttune.probes.common import NullReporter
    from kttune.probes.run import ProbeContext, _plan_cpu_moe, _run_cpu_moe
    from kttune.spec.kt_classes import MATRIX_OUTPUT_FLOPS_CPUS

    inv = collect_inventory()
    opts = ProbeOptions(quick=True, methods=("BF16",), threads=(1,), max_tokens=4, stage_a=False, host_ram=False)

    def notes(cpu, options=opts):
        rep = NullReporter()
        ctx = ProbeContext(options, replace(inv, cpu=cpu), usable_cores(inv.cpu), (0,), (1,), rep)
        curves = _run_cpu_moe(ctx, _plan_cpu_moe(ctx, {}))
        return curves[0].backend, [n for n in rep.notes if n.startswith("expert-shape law: ")]

    backend, _ = notes(inv.cpu)
    build = backend.split(":", 1)[-1]
    if build not in MATRIX_OUTPUT_FLOPS_CPUS:
        pytest.skip(f"kt-kernel's {build} build has no measured constants' CPU")
    measured = MATRIX_OUTPUT_FLOPS_CPUS[build][0]
    vendor, family = measured[0], measured[1]
    on = replace(inv.cpu, vendor=vendor, family=family, model_number=measured[2])
    other = replace(on, family=26, model_number=2) if vendor == "AuthenticAMD" else replace(on, model_number=143)
    assert notes(on)[1] == []
    [line] = notes(other)[1]
    assert "`kttune probe --shape-law` measures r here" in line
    assert notes(other, replace(opts, shape_law=True))[1] == []  # the law's own step measures r
    assert notes(replace(other, family=None))[1] == []


@pytest.mark.kt
def test_a_curve_whose_every_size_was_skipped_is_left_out_with_a_note(tmp_path, monkeypatch):
    """RAM short while stage A ran (the 2-core VM under a concurrent job read it so): every write size
    skipped. The profile is still one that loads, without an empty curve, and its notes say why."""
    from kttune.probes import run as probe_run
    from kttune.probes import stage_a

    monkeypatch.setattr(stage_a, "available_ram_bytes", lambda: 1)
    # stage A in this process, where the short RAM is (its own process is tests/probes/test_isolated.py's)
    monkeypatch.setattr(probe_run, "run_isolated", lambda fn, *a, reporter, **k: fn(*a, reporter=reporter, **k))
    out = tmp_path / "p.json"
    opts = ProbeOptions(
        quick=True, out=out, write_cache=False, merge_cached=False, cpu_moe=False, host_ram=False, gpu=False
    )
    run_probe(opts)
    p = load_profile(out)
    assert not p.curves_of("stage_a_write")
    notes = [n for n in p.provenance.notes if n.startswith("stage_a_write ")]
    assert notes and all("no size could be measured (needs" in n and "left out of the profile" in n for n in notes)


def _bf16_fp8_probe(out, **steps):
    """A quick CPU probe of BF16 and FP8 at one thread (the host RAM step left out, `steps` as given),
    written to `out` and read back."""
    run_probe(
        ProbeOptions(
            quick=True,
            methods=("BF16", "FP8"),
            threads=(1,),
            out=out,
            write_cache=False,
            merge_cached=False,
            host_ram=False,
            gpu=False,
            **steps,
        )
    )
    return load_profile(out)


@pytest.mark.kt
def test_a_stage_a_process_that_dies_leaves_its_method_out_and_the_others_stand(tmp_path, monkeypatch):
    """Each method's stage A runs in a process of its own where the methods' writer layers would not
    share one (here none may: the bound set below 0, so that even writers that keep nothing, as
    kt-kernel's AVX2 classes, which free their layers, get a process each; probes/isolated.py); one
    that dies (the system out of memory) is a note, and the other methods' writes are in the profile."""
    from kttune.probes import run as probe_run

    real = probe_run.run_isolated
    monkeypatch.setattr(probe_run, "child_bytes_bound", lambda: -1)

    def first_dies(fn, *a, plan, **k):
        if plan.tasks[0].method == "BF16":
            raise RuntimeError("probe_stage_a: its process was killed by signal 9")
        return real(fn, *a, plan=plan, **k)

    monkeypatch.setattr(probe_run, "run_isolated", first_dies)
    p = _bf16_fp8_probe(tmp_path / "p.json", cpu_moe=False)
    assert {c.params["method"] for c in p.curves_of("stage_a_write")} == {"FP8"}
    assert any(n.startswith("stage A BF16: probe_stage_a: its process was killed") for n in p.provenance.notes)


@pytest.mark.kt
def test_a_cpu_moe_layer_kt_kernel_would_keep_is_measured_in_its_own_process(tmp_path, monkeypatch):
    """Each (method, shape) whose layers kt-kernel would keep past `ISOLATE_ABOVE_BYTES` runs in a
    process of its own (here every one: the bounds set below 0); its curves come back, its layers stay
    behind with it, and one whose process dies is a note while the other methods' curves stand."""
    from kttune.kernels import kt_spares
    from kttune.probes import cpu_moe as cm
    from kttune.probes import run as probe_run

    real = probe_run.run_isolated
    isolated = []

    def recorded(fn, *a, plan, **k):
        isolated.append(plan.tasks[0].method)
        if plan.tasks[0].method == "FP8":
            raise RuntimeError("probe_cpu_moe: its process was killed by signal 9")
        return real(fn, *a, plan=plan, **k)

    monkeypatch.setattr(probe_run, "run_isolated", recorded)
    monkeypatch.setattr(probe_run, "ISOLATE_ABOVE_BYTES", -1)
    monkeypatch.setattr(probe_run, "child_bytes_bound", lambda: -1)
    kept = kt_spares.spare_count()
    p = _bf16_fp8_probe(tmp_path / "p.json", stage_a=False)
    assert isolated == ["BF16", "FP8"]
    [curve] = p.curves_of("cpu_moe")
    assert curve.params["method"] == "BF16" and curve.backend.startswith("kt-kernel") and len(curve.points) >= 3
    assert kt_spares.spare_count() == kept  # the BF16 layer was built and closed in the other process
    assert any(
        n.startswith(f"cpu_moe FP8 {cm.QUICK_SHAPE.label} 1t: probe_cpu_moe: its process was killed")
        for n in p.provenance.notes
    )


@pytest.mark.kt
def test_a_layer_too_large_for_one_process_at_every_count_is_measured_a_curve_to_a_process(tmp_path, monkeypatch):
    """Where one (method, shape)'s layers at all its thread counts pass what one process may keep (a
    model's own layer of tens of GB at each count), each count's curve is measured in a process of its
    own, and the thread law runs over them here: a curve it names is timed again in a process of its
    own too (the law pointed at the 1-thread curve, since a 2-core VM's counts do not break it). Both
    curves come back, the named one with every timing, and this process keeps no layer."""
    from kttune.kernels import kt_spares
    from kttune.probes import common
    from kttune.probes import run as probe_run

    real = probe_run.run_isolated
    calls = []

    def recorded(fn, *a, **k):
        plan = k.get("plan")
        calls.append((fn.__name__, [t.threads for t in plan.tasks] if plan else k["task"].threads, k.get("law")))
        return real(fn, *a, **k)

    def law(curves):
        return {1: list(next(c for c in curves if c.params["threads"] == 1).points)}

    monkeypatch.setattr(probe_run, "run_isolated", recorded)
    monkeypatch.setattr(probe_run, "ISOLATE_ABOVE_BYTES", -1)
    monkeypatch.setattr(probe_run, "child_bytes_bound", lambda: -1)
    monkeypatch.setattr(common, "slower_than_larger_pools", law)
    kept = kt_spares.spare_count()
    out = tmp_path / "p.json"
    run_probe(
        ProbeOptions(
            quick=True,
            methods=("BF16",),
            threads=(1, 2),
            out=out,
            write_cache=False,
            merge_cached=False,
            host_ram=False,
            gpu=False,
            stage_a=False,
        )
    )
    p = load_profile(out)
    assert calls == [("probe_cpu_moe", [1], False), ("probe_cpu_moe", [2], False), ("retime_apart", 1, None)]
    one, two = sorted(p.curves_of("cpu_moe"), key=lambda c: c.params["threads"])
    assert (one.params["threads"], two.params["threads"]) == (1, 2) and one.backend.startswith("kt-kernel")
    assert all(len(pt.extra["timings"]) >= 2 for pt in one.points)
    assert kt_spares.spare_count() == kept
    assert any("cpu_moe BF16 1t: " in n and "slower than a larger pool allows" in n for n in p.provenance.notes)


@pytest.mark.kt
def test_the_quick_layer_is_measured_in_the_probes_own_process():
    """The quick probe's layers are far below `ISOLATE_ABOVE_BYTES`: no process start per method."""
    from kttune.probes import cpu_moe as cm
    from kttune.probes.inventory import collect_cpu

    cpu = collect_cpu()
    opts = cm.CpuMoeOptions(shapes=(cm.QUICK_SHAPE,), tokens=tuple(cm.token_series(256, quick=True)), quick=True)
    plan = cm.plan_cpu_moe(opts, cpu, cores=16, numa_ids=[0])
    assert all(cm.kept_layer_bytes(one, opts, cpu) <= cm.ISOLATE_ABOVE_BYTES for one in plan.by_layer())


@pytest.mark.kt
@pytest.mark.parametrize("step", ["stage_a", "cpu_moe"])
def test_methods_whose_layers_fit_one_process_share_it(tmp_path, monkeypatch, step):
    """The isolated parts of a step go to as few processes as `child_bytes_bound` allows (each one
    starts Python, torch and kt-kernel again): with room for both, BF16 and FP8 are measured in one,
    and both methods' curves come back."""
    from kttune.probes import run as probe_run

    real = probe_run.run_isolated
    calls = []

    def recorded(fn, *a, plan, **k):
        calls.append(list(dict.fromkeys(t.method for t in plan.tasks)))
        return real(fn, *a, plan=plan, **k)

    monkeypatch.setattr(probe_run, "run_isolated", recorded)
    monkeypatch.setattr(probe_run, "ISOLATE_ABOVE_BYTES", -1)
    monkeypatch.setattr(probe_run, "child_bytes_bound", lambda: 1 << 50)
    off = {"stage_a": "cpu_moe", "cpu_moe": "stage_a"}[step]
    p = _bf16_fp8_probe(tmp_path / "p.json", **{off: False})
    assert calls == [["BF16", "FP8"]]
    kind = {"stage_a": "stage_a_write", "cpu_moe": "cpu_moe"}[step]
    assert {c.params["method"] for c in p.curves_of(kind)} == {"BF16", "FP8"}


def test_a_probe_without_a_model_times_mxfp4_and_a_model_probe_its_own_method():
    """Unasked, a probe without a model times MXFP4 beside the six methods (gpt-oss and
    DeepSeek-V4-Flash serve in it, and the same-bits stand-in read gpt-oss's hybrid path 74-82% fast:
    docs/probe.md#mx-methods); a `--model` probe adds the model's own method only; `--methods` is
    taken as given."""
    from kttune import app
    from kttune.probes.run import cpu_moe_options

    assert cpu_moe_options(ProbeOptions(quick=True)).model_methods == ("MXFP4",)
    assert cpu_moe_options(ProbeOptions()).model_methods == ("MXFP4",)
    assert cpu_moe_options(ProbeOptions(model=app.model_spec("qwen3-30b-a3b"))).model_methods == ("BF16",)
    assert cpu_moe_options(ProbeOptions(model=app.model_spec("gpt-oss-20b"))).model_methods == ("MXFP4",)
    assert cpu_moe_options(ProbeOptions(quick=True, methods=("BF16",))).methods == ("BF16",)


@pytest.mark.kt
def test_the_quick_plan_builds_mxfp4_where_kt_kernel_runs_it():
    from kttune.kernels.kt_ext import load_kt_kernel
    from kttune.probes import cpu_moe as cm
    from kttune.probes.inventory import collect_cpu
    from kttune.probes.run import cpu_moe_options

    cpu = collect_cpu()
    plan = cm.plan_cpu_moe(cpu_moe_options(ProbeOptions(quick=True)), cpu, cores=16, numa_ids=[0])
    planned = {t.method for t in plan.tasks}
    supported = set(cm.supported_methods(load_kt_kernel(), cpu.isa))
    assert planned == supported & (set(cm.DEFAULT_METHODS) | {"MXFP4"})
    assert "MXFP8" not in planned


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "glm-4.5-air", "qwen3-next-80b-a3b"])
def test_quick_series_times_the_matrix_kernel_at_the_rows_a_long_forward_runs(model):
    """The quick layer's matrix-kernel rate is what every long hybrid forward is charged at, and its
    time per flop depends on the rows an expert runs (on Sapphire Rapids 16-64 rows cost 1.1-1.3x
    what 64-256 do: docs/probe.md#the-quick-layers-series-how-far-up-in-tokens). So the default
    quick series holds at least two lengths at or above the rows a catalog model's 1,024-token
    forward runs an expert, on the matrix kernel: a slope measured where the models run, not
    carried up from below (the 256-token series had one such point)."""
    from kttune import app
    from kttune.probes.cpu_moe import QUICK_SHAPE
    from kttune.probes.run import cpu_moe_options
    from kttune.spec.kt_classes import kt_matmul_above

    spec = app.model_spec(model)
    model_rows = 1024 * spec.top_k / spec.num_experts
    switch = kt_matmul_above("AMXBF16_MOE", QUICK_SHAPE.experts, QUICK_SHAPE.top_k)
    tokens = cpu_moe_options(ProbeOptions(quick=True)).tokens
    above = [t for t in tokens if t > switch and t * QUICK_SHAPE.top_k / QUICK_SHAPE.experts >= model_rows]
    assert len(above) >= 2, (tokens, model_rows)


def test_the_cold_cpu_moe_options_cycle_the_quick_layer_past_twice_the_cache():
    """The probe keeps one layer (cold_bytes 0); the cold variant cycles the quick layer over copies
    past twice the last-level cache, so each timed call reads its experts from DRAM. Until 2026-12-07
    the benchmark's cold variant took the probe's options and timed seven H100 instances' layer warm
    twice: the cold options must cycle over more than one layer whatever the cache reads."""
    from kttune.probes import cpu_moe as cm

    quick = ProbeOptions(quick=True, threads=(11,), methods=("BF16",), max_tokens=1024)
    assert cpu_moe_options(quick).cold_bytes == 0
    l3 = 300 * 2**20
    cold = cold_cpu_moe_options(quick, l3)
    assert cold.cold_bytes == 2 * l3 and cold.tokens == cpu_moe_options(quick).tokens
    here = collect_inventory().cpu.last_level_cache_bytes or 0
    assert cold_cpu_moe_options(quick).cold_bytes == max(COLD_CPU_MOE_FLOOR_BYTES, 2 * here)  # this host's
    assert cold_cpu_moe_options(quick, 0).cold_bytes == COLD_CPU_MOE_FLOOR_BYTES  # the size unknown
    for llc in (0, 2**20, l3):
        copies = cm.cold_copies("BF16", cm.QUICK_SHAPE, cold_cpu_moe_options(quick, llc).cold_bytes, 2**40, 1024)
        assert copies > 1
