"""The CPU expert probe: kt-kernel's real MoE kernels agree with the torch reference within each
method's quantization error, and the probe's figures come from them."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from kttune.probes import common
from kttune.probes.common import NullReporter
from kttune.spec.kt_classes import KT_GEMM_DISPATCH_KERNELS, kt_class_leaks, kt_matmul_above
from kttune.kernels.kt_ext import load_kt_kernel
from kttune.kernels.kt_moe import kt_class_name
from kttune.kernels.kt_pool import pool_split
from kttune.probes import cpu_moe as cm
from kttune.probes.inventory import collect_cpu, numa_nodes_with_cpus, usable_cores
from kttune.spec.moe_shape import MoeLayerShape

REQUIRED_PARAMS = {"method", "threads", "threadpools", "hidden", "inter", "experts", "top_k", "cpu_experts"}

# Relative mean-absolute error of one kt-kernel forward against moe_forward on the weights the
# kernel really holds (dequantized): only the kernel's bf16 activations/accumulation differ
# (measured: 0.3 % AVX2 and AMX; AMX RAWINT4 1.2 %). AMXINT4/AMXINT8 quantize inside kt-kernel (per
# output channel), so their reference is the bf16 input and the bound is their quantization error
# (measured on the H200 box's Xeon: AMXINT4 24-26 %, AMXINT8 2.2-2.7 %).
KERNEL_TOL = {
    "BF16": 0.02,
    "FP8": 0.02,
    "FP8_PERCHANNEL": 0.02,
    "RAWINT4": 0.02,
    "AMXINT8": 0.10,
    "AMXINT4": 0.40,
    "MXFP4": 0.02,  # measured on the development VM's AMX Xeon: 0.35 %
    "MXFP8": 0.02,  # 0.33 %
}
# ... and against the unquantized bf16 weights: the method's quantization error
# (measured on AVX2: FP8 block 4.8 %, RAWINT4 group-32 17 %; on AMX: MXFP4 21 %, MXFP8 5.4 %).
QUANT_TOL = {
    "BF16": 0.02,
    "FP8": 0.10,
    "FP8_PERCHANNEL": 0.10,
    "RAWINT4": 0.30,
    "AMXINT8": 0.10,
    "AMXINT4": 0.40,
    "MXFP4": 0.30,
    "MXFP8": 0.10,
}


def rel_err(a, b) -> float:
    return ((a.float() - b.float()).abs().mean() / b.float().abs().mean()).item()


@pytest.fixture(scope="module")
def cpu():
    return collect_cpu()


def test_token_and_thread_series():
    assert cm.token_series(256, quick=True) == [1, 4, 16, 64, 256]
    assert cm.token_series(100, quick=False) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert cm.thread_series(16, quick=False) == [11, 13, 15]
    assert cm.thread_series(16, quick=True) == [11, 13]
    assert cm.thread_series(2, quick=True) == [1, 2]
    assert cm.thread_series(1, quick=True) == [1]
    assert pool_split(15, 2) == [8, 7]  # as kt-kernel's _get_cpu_infer splits --kt-cpuinfer


def test_layer_that_does_not_fit_shrinks_experts_with_a_reason():
    shape = MoeLayerShape(hidden=7168, inter=2048, experts=384, top_k=8)
    w, s = cm.host_bytes_needed("BF16", shape, 4096)
    fitted, max_tok, skipped = cm._fit_shape("BF16", shape, 4096, 1, budget=(w + s) // 10)
    assert fitted.experts < 384 and fitted.experts >= 16
    assert max_tok == 4096
    assert "experts reduced from 384" in skipped[0]["reason"]
    with pytest.raises(MemoryError):
        cm._fit_shape("BF16", shape, 4096, 1, budget=1024)


@pytest.mark.kt
def test_kernel_classes_come_from_the_loaded_variant(kt, cpu):
    names = set(dir(kt.ext.moe))
    methods = cm.supported_methods(kt, cpu.isa)
    assert {"BF16", "FP8", "RAWINT4"} <= set(methods)
    for m in methods:
        assert kt_class_name(kt, m, cpu.isa) in names
    if cpu.has("amx_int8"):
        assert {"AMXINT4", "AMXINT8"} <= set(methods)


@pytest.mark.kt
@pytest.mark.parametrize("method", cm.PROBE_METHODS)
@pytest.mark.parametrize("threads", ["one", "all"])
def test_one_kt_forward_agrees_with_torch_reference(kt, cpu, method, threads):
    import torch

    from kttune.kernels.cpu_moe import TorchCpuMoE, moe_forward, random_routing
    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_moe import KtMoeLayer, kt_class_name

    if method not in cm.supported_methods(kt, cpu.isa):
        pytest.skip(f"{method} has no kernel in kt-kernel {kt.variant}")
    shape = MoeLayerShape(hidden=512, inter=256, experts=8, top_k=4)
    dense = TorchCpuMoE.random(shape.experts, shape.hidden, shape.inter, torch.bfloat16, seed=5)
    weights = HostExperts.from_dense(method, dense.gate, dense.up, dense.down)
    g, u, d = weights.dense()
    n = 1 if threads == "one" else usable_cores(cpu)
    x = torch.randn(9, shape.hidden, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    ids, w = random_routing(9, shape.experts, shape.top_k, seed=7)
    out = torch.full((9, shape.hidden), float("nan"), dtype=torch.bfloat16)
    with KtMoeLayer(weights, top_k=shape.top_k, threads=n, max_tokens=16, isa=cpu.isa) as layer:
        assert layer.kernel_class == kt_class_name(kt, method, cpu.isa)
        layer.forward(x, ids, w, out)
    assert torch.isfinite(out.float()).all()
    assert rel_err(out, moe_forward(x, ids, w, g, u, d)) < KERNEL_TOL[method]
    assert rel_err(out, moe_forward(x, ids, w, dense.gate, dense.up, dense.down)) < QUANT_TOL[method]


@pytest.mark.kt
def test_building_a_layer_prints_nothing_on_stdout(kt, cpu, capfd):
    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_moe import KtMoeLayer

    w = HostExperts.random("BF16", 256, 128, 4)
    with KtMoeLayer(w, top_k=2, threads=1, max_tokens=4, isa=cpu.isa):
        pass
    assert capfd.readouterr().out == ""


@pytest.mark.kt
def test_probe_figures_come_from_kt_kernel(kt, cpu):
    cores = usable_cores(cpu)
    opts = cm.CpuMoeOptions(
        shapes=(MoeLayerShape(512, 256, 16, 4),),
        tokens=(1, 8, 32),
        threads=(1,),
        quick=True,
        warmup=1,
        repeats=3,
        min_total_s=0.0,
    )
    curves = cm.probe_cpu_moe(opts, cpu, cores=cores, numa_ids=numa_nodes_with_cpus(cpu))
    # unasked, the MX methods are measured only for a model served with one (`model_methods`)
    assert {c.params["method"] for c in curves} == set(cm.supported_methods(kt, cpu.isa)) & set(cm.DEFAULT_METHODS)
    mx = cm.probe_cpu_moe(replace(opts, model_methods=("MXFP4",)), cpu, cores=cores, numa_ids=numa_nodes_with_cpus(cpu))
    assert {c.params["method"] for c in mx} - {c.params["method"] for c in curves} == (
        {"MXFP4"} & set(cm.supported_methods(kt, cpu.isa))
    )
    for c in curves + mx:
        assert c.kind == "cpu_moe" and c.x_unit == "tokens"
        assert REQUIRED_PARAMS <= set(c.params)
        assert c.backend == f"kt-kernel:{kt.variant}"
        assert c.params["kernel"] in dir(kt.ext.moe)
        # a class that switches GEMM kernels above 4E/k = 16 tokens is measured on each side of it
        switches = c.params["kernel"] in KT_GEMM_DISPATCH_KERNELS
        assert [p.x for p in c.points] == ([1, 8, 16, 20, 32] if switches else [1, 8, 32])
        assert all(p.t_ms > 0 and p.t_ms_p10 <= p.t_ms <= p.t_ms_p90 and p.n >= 3 for p in c.points)


def test_torch_fallback_is_labelled(monkeypatch, cpu):
    monkeypatch.setattr(cm, "load_kt_kernel", lambda: None)
    opts = cm.CpuMoeOptions(
        shapes=(MoeLayerShape(256, 128, 8, 2),),
        tokens=(1, 4),
        threads=(1,),
        quick=True,
        warmup=1,
        repeats=3,
        min_total_s=0.0,
    )
    plan = cm.plan_cpu_moe(opts, cpu, 1, [0])
    assert any("torch fallback" in n for n in plan.notes)
    curves = cm.probe_cpu_moe(opts, cpu, cores=1, numa_ids=[0], plan=plan)
    assert len(curves) == 1
    assert curves[0].backend == "torch-cpu" and curves[0].params["method"] == "BF16"
    assert [p.x for p in curves[0].points] == [1, 4]


def test_unknown_or_unsupported_method_is_a_user_error(cpu):
    from kttune.errors import UserError

    opts = cm.CpuMoeOptions(shapes=(cm.QUICK_SHAPE,), tokens=(1,), methods=("NOPE",))
    with pytest.raises(UserError, match="NOPE"):
        cm.plan_cpu_moe(opts, cpu, 2, [0])


def test_slow_sizes_are_skipped_with_a_reason():
    from kttune.probes.common import NullReporter

    task = cm.CpuMoeTask("BF16", 1, 1, shape=cm.QUICK_SHAPE, tokens=(1, 10, 100))
    opts = cm.CpuMoeOptions(shapes=(cm.QUICK_SHAPE,), tokens=(1, 10, 100), max_point_s=0.05, warmup=0, repeats=1)
    import time

    pts, skipped = cm._measure_curve(lambda n: lambda: time.sleep(0.01), task, [1, 10, 100], opts, NullReporter(), "t")
    assert [p.x for p in pts] == [1]
    assert [s["x"] for s in skipped] == [10, 100]
    assert "budget" in skipped[0]["reason"]


@pytest.mark.parametrize("cores", [1, 2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("quick", [True, False])
def test_one_machine_one_answer_cpu_moe_stage_a_and_pipeline_measure_the_same_threads(cores, quick, monkeypatch):
    from kttune.probes import gpu_pipeline, stage_a

    monkeypatch.setattr(gpu_pipeline, "_cores", lambda: cores)
    moe = cm.thread_series(cores, quick)
    assert moe == stage_a.stage_a_threads(cores, quick) == sorted(gpu_pipeline.default_thread_options(quick))
    assert set(cm.thread_series(cores, True)) <= set(cm.thread_series(cores, False))  # quick's picks exist in full
    assert all(1 <= t <= cores for t in moe)


def test_full_plan_measures_every_shape_at_the_same_threads(cpu):
    tokens = tuple(cm.token_series(8192, quick=False))
    opts = cm.CpuMoeOptions(shapes=cm.FULL_SHAPES, tokens=tokens, methods=("BF16",))
    plan = cm.plan_cpu_moe(opts, cpu, cores=16, numa_ids=[0, 1])
    for shape in cm.FULL_SHAPES:
        tasks = [t for t in plan.tasks if t.shape == shape and not t.numa_nodes]
        assert [t.threads for t in tasks] == [11, 13, 15]
        for t in tasks:
            assert t.threadpools == 2  # one pool per NUMA node
            # the series, and where this host's BF16 class switches GEMM kernels (4E/k), both sides
            above = kt_matmul_above(kt_class_name(load_kt_kernel(), "BF16", cpu.isa), shape.experts, shape.top_k)
            assert set(t.tokens) == set(tokens) | ({above, above + above // 4} if above else set())
    # and the first shape on node 0 alone, one pool (tests/probes/test_inventory_hosts.py: real trees)
    assert {t.shape for t in plan.tasks if t.numa_nodes} <= {cm.FULL_SHAPES[0]}
    assert plan.steps == sum(1 + len(t.tokens) for t in plan.tasks)


def test_a_plan_splits_into_one_plan_per_layer_in_its_own_order(cpu):
    """`CpuMoePlan.by_layer`: each (method, shape)'s curves together (the unit the thread law times
    again), every task once, in the plan's order, the notes left with the whole plan."""
    tokens = tuple(cm.token_series(256, quick=True))
    opts = cm.CpuMoeOptions(shapes=cm.FULL_SHAPES, tokens=tokens, methods=("BF16", "FP8"))
    plan = cm.plan_cpu_moe(opts, cpu, cores=16, numa_ids=[0, 1])
    parts = plan.by_layer()
    assert [t for part in parts for t in part.tasks] == plan.tasks
    assert [(p.tasks[0].method, p.tasks[0].shape) for p in parts] == [
        (m, s) for s in cm.FULL_SHAPES for m in ("BF16", "FP8")
    ]
    assert all(len({(t.method, t.shape) for t in p.tasks}) == 1 and not p.notes for p in parts)
    # node 0's one-pool curves go with their layer's other thread counts
    assert any(t.numa_nodes for t in parts[0].tasks)


@pytest.mark.kt
def test_the_bytes_a_layer_leaves_behind_count_only_classes_kt_kernel_cannot_free(kt, cpu, monkeypatch):
    """`kept_layer_bytes`: per curve, the layer times its cold copies, for a class that leaks in the
    loaded kt-kernel's version (kttune.spec.kt_classes.kt_class_leaks), else nothing."""
    shape = cm.QUICK_SHAPE
    opts = cm.CpuMoeOptions(shapes=(shape,), tokens=(1, 16), methods=("BF16",), threads=(1, 2))
    plan = cm.plan_cpu_moe(opts, cpu, cores=2, numa_ids=[0])
    layer = cm.layer_nbytes("BF16", shape)
    leaks = kt_class_leaks(kt_class_name(kt, "BF16", cpu.isa), kt.version)
    assert cm.kept_layer_bytes(plan, opts, cpu) == (2 * layer if leaks else 0)
    cold = replace(opts, cold_bytes=3 * layer)
    assert cm.kept_layer_bytes(plan, cold, cpu) == (6 * layer if leaks else 0)
    monkeypatch.setattr(cm, "load_kt_kernel", lambda: replace(kt, version="99.0.0"))  # a kt-kernel that frees
    assert cm.kept_layer_bytes(plan, cold, cpu) == 0
    monkeypatch.setattr(cm, "load_kt_kernel", lambda: None)  # the torch fallback frees its own
    assert cm.kept_layer_bytes(plan, cold, cpu) == 0


def test_a_small_layer_is_cycled_over_copies_up_to_the_cold_bytes():
    """`CpuMoeOptions.cold_bytes`: enough copies that their weights reach it, at most MAX_COLD_COPIES
    and as many as the RAM budget holds; one for a layer that large already."""
    shape = MoeLayerShape(hidden=256, inter=128, experts=8, top_k=2)
    layer = 8 * cm.expert_nbytes("BF16", 256, 128)
    big = 10**12
    assert cm.cold_copies("BF16", shape, 0, big, 64) == 1
    assert cm.cold_copies("BF16", shape, layer, big, 64) == 1
    assert cm.cold_copies("BF16", shape, 3 * layer - 1, big, 64) == 3
    assert cm.cold_copies("BF16", shape, 1000 * layer, big, 64) == cm.MAX_COLD_COPIES
    w, s = cm.host_bytes_needed("BF16", shape, 64)
    assert cm.cold_copies("BF16", shape, 10 * layer, 2 * (w + s), 64) == 2


@pytest.mark.kt
def test_the_probe_records_the_bytes_its_calls_cycled_over(kt, cpu):
    shape = MoeLayerShape(hidden=256, inter=128, experts=8, top_k=2)
    layer = 8 * cm.expert_nbytes("BF16", 256, 128)
    opts = cm.CpuMoeOptions(
        shapes=(shape,), tokens=(4, 16), methods=("BF16",), threads=(1,), warmup=1, repeats=3, cold_bytes=3 * layer
    )
    (curve,) = cm.probe_cpu_moe(opts, cpu, cores=1, numa_ids=[0])
    assert [p.extra["source_bytes"] for p in curve.points] == [3 * layer, 3 * layer]
    (one,) = cm.probe_cpu_moe(replace(opts, cold_bytes=0), cpu, cores=1, numa_ids=[0])
    assert [p.extra["source_bytes"] for p in one.points] == [layer, layer]


SMALL = MoeLayerShape(hidden=256, inter=128, experts=8, top_k=2)


def _two_counts(**over) -> cm.CpuMoeOptions:
    """A small BF16 layer at 1 and 2 threads, every point timed (the thread law's tests)."""
    return cm.CpuMoeOptions(
        shapes=(SMALL,), tokens=(4, 16), methods=("BF16",), threads=(1, 2), warmup=1, repeats=3, min_total_s=0.0, **over
    )


@pytest.mark.kt
def test_the_probe_times_a_named_point_again_on_kt_kernel(kt, cpu, monkeypatch):
    """Wired into the probe: once a (method, shape)'s counts are measured, the points the law names
    are timed again on a layer of their own count (real kt-kernel, built once for the curve's points)
    and keep every timing. The law is pointed at the 1-thread curve's points, since a 2-core VM's
    counts do not break it."""
    named, builds = [], []

    def law(curves):
        one = next(c for c in curves if c.params["threads"] == 1)
        named.append(sorted(c.params["threads"] for c in curves))
        return {1: list(one.points)}

    real_build = cm._kt_layers

    def counted(b, *args):
        builds.append(b.task.threads)
        return real_build(b, *args)

    monkeypatch.setattr(common, "slower_than_larger_pools", law)
    monkeypatch.setattr(cm, "_kt_layers", counted)
    opts = _two_counts()
    rep = NullReporter()
    curves = cm.probe_cpu_moe(opts, cpu, rep, cores=2, numa_ids=[0])
    assert named == [[1, 2]]  # once, over both counts of the one (method, shape)
    assert builds == [1, 2, 1]  # each count's curve, then the 1-thread layer once for both its points
    one = next(c for c in curves if c.params["threads"] == 1)
    for p in one.points:
        assert len(p.extra["timings"]) >= 2 and p.t_ms == statistics.median(t["ms"] for t in p.extra["timings"])
        assert p.extra["source_bytes"] > 0
    assert any("slower than a larger pool allows" in n for n in rep.notes)


@pytest.mark.kt
def test_curves_measured_without_the_law_are_timed_again_one_build_per_curve(kt, cpu, monkeypatch):
    """The path of a (method, shape) too large for one process (kttune.probes.run): its curves
    measured without the thread law (`law=False`: nothing timed again), then the law over them with
    `retime_apart` per curve. The law names the 1-thread curve's points: that curve's layer is built
    once more, at the experts and copies the curve was measured on, and its points keep every timing
    as the probe's own pass keeps them."""
    named, builds = [], []

    def law(curves):
        named.append(sorted(c.params["threads"] for c in curves))
        return {1: list(next(c for c in curves if c.params["threads"] == 1).points)}

    real_build = cm._kt_layers

    def counted(b, *args):
        builds.append((b.task.threads, b.shape.experts, b.copies, b.tokens))
        return real_build(b, *args)

    monkeypatch.setattr(common, "slower_than_larger_pools", law)
    monkeypatch.setattr(cm, "_kt_layers", counted)
    layer = cm.layer_nbytes("BF16", SMALL)
    opts = _two_counts(cold_bytes=2 * layer)
    plan = cm.plan_cpu_moe(opts, cpu, cores=2, numa_ids=[0])
    rep = NullReporter()
    curves = cm.probe_cpu_moe(opts, cpu, rep, cores=2, numa_ids=[0], plan=plan, law=False)
    assert named == [] and [b[0] for b in builds] == [1, 2]
    assert not any("slower than a larger pool allows" in n for n in rep.notes)
    task_of = {t.threads: t for t in plan.tasks}

    def again(c, points, label):
        return cm.retime_apart(
            opts, cpu, rep, task=task_of[c.params["threads"]], curve=c, points=points, label=label, numa_ids=[0]
        )

    out = cm.law_by_pool(curves, rep, curve_again=again)
    assert named == [[1, 2]]
    assert builds[2:] == [builds[0]]  # the 1-thread layer again, as it was measured, once for both points
    assert builds[0][2] == 2 and builds[0][3] == 16  # its two cold copies, scratch for 16 tokens
    assert out[1] is curves[1]
    for before, p in zip(curves[0].points, out[0].points):
        assert p.x == before.x and len(p.extra["timings"]) >= 2
        assert p.t_ms == statistics.median(t["ms"] for t in p.extra["timings"])
        assert p.extra["source_bytes"] == before.extra["source_bytes"] == 2 * layer
    assert any("slower than a larger pool allows" in n for n in rep.notes)


@pytest.mark.kt
def test_a_layer_built_with_gpu_experts_skips_them(kt, cpu):
    """sglang-kt's order (the mask filled before the build): the layer's output is the reference's
    over the other experts only, as with those experts sent as id -1 (the path runner's way)."""
    import torch

    from kttune.kernels.cpu_moe import TorchCpuMoE, moe_forward, random_routing
    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_moe import KtMoeLayer

    dense = TorchCpuMoE.random(8, 512, 256, torch.bfloat16, seed=5)
    weights = HostExperts.from_dense("BF16", dense.gate, dense.up, dense.down)
    g, u, d = weights.dense()
    x = torch.randn(9, 512, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    ids, w = random_routing(9, 8, 2, seed=7)
    cpu_only = ids.masked_fill(ids < 3, -1)
    masked, dropped = (torch.full((9, 512), float("nan"), dtype=torch.bfloat16) for _ in range(2))
    with KtMoeLayer(weights, top_k=2, threads=1, max_tokens=16, isa=cpu.isa, gpu_experts=3) as layer:
        assert layer.gpu_mask.tolist() == [True] * 3 + [False] * 5
        layer.forward(x, ids, w, masked)
        layer.forward(x, cpu_only, w, dropped)
    ref = moe_forward(x, cpu_only, w, g, u, d)
    assert rel_err(masked, ref) < KERNEL_TOL["BF16"]
    assert rel_err(dropped, ref) < KERNEL_TOL["BF16"]
    assert rel_err(masked, moe_forward(x, ids, w, g, u, d)) > 0.1  # the masked experts' share is gone


def low_address_mask(experts: int):
    """A zeroed bool tensor mapped below 2**31, where the GPU box's Python heap puts small tensors
    (its kt-kernel consoles print such addresses); None where no such page can be mapped."""
    import ctypes
    import mmap

    import torch

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    fixed_noreplace = 0x100000  # MAP_FIXED_NOREPLACE (Linux 4.17+): fails rather than replace a mapping
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | fixed_noreplace
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    for addr in range(0x10000000, 0x7FFF0000, 0x08000000):
        got = libc.mmap(addr, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
        if got == addr:  # left mapped: the tensor lives on it
            return torch.frombuffer((ctypes.c_bool * experts).from_address(addr), dtype=torch.bool)
        if got not in (None, ctypes.c_void_p(-1).value):  # a kernel without NOREPLACE took it as a hint
            libc.munmap(got, mmap.PAGESIZE)
    return None


@pytest.mark.kt
def test_a_mask_at_a_low_address_is_still_a_mask(kt, cpu):
    """kt-kernel 0.7.2's `MOEConfig(E, k, H, I, x)` reads an `x` that fits in 32 bits as a GPU-expert
    count and leaves the mask null; `moe_config` keeps such an address a mask pointer, and a layer
    built over it skips its experts (on the GPU box the mask was ignored this way)."""
    import torch

    from kttune.kernels.cpu_moe import TorchCpuMoE, moe_forward, random_routing
    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_moe import KtMoeLayer, moe_config

    mask = low_address_mask(8)
    if mask is None:
        pytest.skip("no page could be mapped below 2**31 here")
    mask[:3] = True
    ptr = mask.data_ptr()
    assert ptr < 2**31
    assert kt.ext.moe.MOEConfig(8, 2, 512, 256, ptr).gpu_experts_mask == 0  # the hazard, as bound
    assert moe_config(kt.ext, 8, 2, 512, 256, ptr).gpu_experts_mask == ptr

    dense = TorchCpuMoE.random(8, 512, 256, torch.bfloat16, seed=5)
    weights = HostExperts.from_dense("BF16", dense.gate, dense.up, dense.down)
    g, u, d = weights.dense()
    x = torch.randn(9, 512, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    ids, w = random_routing(9, 8, 2, seed=7)
    out = torch.full((9, 512), float("nan"), dtype=torch.bfloat16)
    with KtMoeLayer(weights, top_k=2, threads=1, max_tokens=16, isa=cpu.isa, gpu_mask=mask) as layer:
        assert layer.gpu_mask.data_ptr() == ptr
        layer.forward(x, ids, w, out)
    assert rel_err(out, moe_forward(x, ids.masked_fill(ids < 3, -1), w, g, u, d)) < KERNEL_TOL["BF16"]


def test_a_layer_takes_one_placement_of_gpu_experts():
    import torch

    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_moe import KtMoeLayer

    host = HostExperts.empty("BF16", 64, 32, 4)
    for bad in (
        torch.zeros(5, dtype=torch.bool),
        torch.zeros(4, dtype=torch.int8),
        torch.zeros(8, dtype=torch.bool)[::2],
    ):
        with pytest.raises(ValueError, match="contiguous host bool tensor of 4 experts"):
            KtMoeLayer(host, top_k=1, threads=1, gpu_mask=bad)
    with pytest.raises(ValueError, match="no gpu_experts"):
        KtMoeLayer(host, top_k=1, threads=1, gpu_experts=1, gpu_mask=torch.zeros(4, dtype=torch.bool))
