"""Where `kttune probe --quick` spends its time: kt-kernel layer builds, host weights, timed work.

Part 1 runs the quick probe as the CLI does (`run_probe(ProbeOptions(quick=True))`, nothing cached;
the steps the CLI runs in processes of their own, here in this one, so that their builds are seen)
and counts, per step (CPU MoE, stage A, GPU pipeline when CUDA is present), the kt-kernel layers
built (`KtMoeLayer`, each a `load_weights_task` over the whole layer), the host weight layers drawn
(`HostExperts.random`) with their bytes and seconds, and the step's wall time.

Part 2 builds, without a GPU, what the quick probe's layerwise pipeline builds on the host for the
representative shapes (Qwen3-30B-A3B BF16, DeepSeek-V3 FP8, Kimi-K2 RAWINT4): one host layer per
shape and one kt-kernel writer layer per (shape, thread count), as `kttune.probes.gpu_suite` plans
them. Layers that do not fit in this machine's free RAM are not built; their bytes are still counted
and their build times scaled from a 2 GiB part of the same layer built here.

kt-kernel 0.7.2 does not give back a closed layer's memory (measured here: resident memory grows by
the layer's size with every `KtMoeLayer` built and closed over the same host experts, and
`malloc_trim` does not return it), so every layer a probe builds stays resident until the process
ends: fewer and smaller builds also bound the probe's peak RAM.

    python benchmarks/bench_quick_probe.py                 # both parts
    python benchmarks/bench_quick_probe.py --part 2 --cores 16   # part 2 as planned on 16 cores
    python benchmarks/bench_quick_probe.py --part 2 --full-layers --threads 13  # the old quick plan
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import defaultdict

from kttune.kernels import expert_weights, kt_moe
from kttune.units import GIB


def _probe_module() -> str:
    """The probe module (cpu_moe, stage_a, gpu_pipeline, ...) that called into the build."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_globals.get("__name__", "")
        if name.startswith("kttune.probes."):
            return name.rsplit(".", 1)[1]
        f = f.f_back
    return "other"


class BuildCounter:
    """Wraps `KtMoeLayer.__init__` and `HostExperts.random` to count and time what they build (per
    calling probe module), and the probes' entry points to time each step."""

    STEPS = (
        ("kttune.probes.run", "probe_cpu_moe"),
        ("kttune.probes.run", "probe_stage_a"),
        ("kttune.probes.gpu_pipeline", "probe_pipeline_layer"),
        ("kttune.probes.gpu_suite", "run_gpu_probes"),
    )

    def __init__(self) -> None:
        self.layers: dict[str, list[tuple[int, float]]] = defaultdict(list)  # module -> (bytes, s)
        self.hosts: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.wall: dict[str, float] = defaultdict(float)
        self._saved: list[tuple[object, str, object]] = []

    def _patch(self, owner, name: str, value) -> None:
        self._saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    def __enter__(self) -> "BuildCounter":
        import importlib

        counter = self
        init = kt_moe.KtMoeLayer.__init__
        random = expert_weights.HostExperts.random.__func__

        def counted_init(layer, host, *a, **k):
            t0 = time.perf_counter()
            init(layer, host, *a, **k)
            counter.layers[_probe_module()].append((host.nbytes, time.perf_counter() - t0))

        def counted_random(cls, *a, **k):
            t0 = time.perf_counter()
            out = random(cls, *a, **k)
            counter.hosts[_probe_module()].append((out.nbytes, time.perf_counter() - t0))
            return out

        self._patch(kt_moe.KtMoeLayer, "__init__", counted_init)
        self._patch(expert_weights.HostExperts, "random", classmethod(counted_random))
        for mod_name, fn_name in self.STEPS:
            mod = importlib.import_module(mod_name)
            fn = getattr(mod, fn_name)

            def timed(*a, _fn=fn, _name=fn_name, **k):
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    counter.wall[_name] += time.perf_counter() - t0

            self._saved.append((mod, fn_name, fn))
            setattr(mod, fn_name, timed)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, value in reversed(self._saved):
            setattr(owner, name, value)


def part1() -> None:
    from kttune.probes.common import NullReporter
    from kttune.probes.run import ProbeOptions, run_probe

    from kttune.probes import run as probe_run

    # every step in this process, where the counter sees its builds (the probe runs stage A's methods,
    # and a model's CPU MoE layers past 2 GiB, in processes of their own: probes/isolated.py)
    isolated = probe_run.run_isolated
    probe_run.run_isolated = lambda fn, *a, reporter, **k: fn(*a, reporter=reporter, **k)
    with BuildCounter() as counter:
        t0 = time.perf_counter()
        profile = run_probe(
            ProbeOptions(quick=True, write_cache=False, merge_cached=False, command="benchmarks/bench_quick_probe.py"),
            NullReporter(),
        )
        wall = time.perf_counter() - t0
    probe_run.run_isolated = isolated
    threads = defaultdict(set)
    for c in profile.curves:
        if c.params.get("threads") is not None:
            threads[c.kind].add(int(c.params["threads"]))
    print(f"part 1: run_probe(quick=True) on {profile.provenance.machine}: {wall:.1f} s in all")
    print("  thread counts measured: " + ", ".join(f"{k} {sorted(v)}" for k, v in sorted(threads.items())))
    print("  step wall s: " + ", ".join(f"{k} {v:.1f}" for k, v in counter.wall.items()))
    print(
        f"  {'built by':<14} {'kt layers':>9} {'layer GB':>9} {'build s':>8} {'host layers':>11} {'host GB':>8} {'host s':>7}"
    )
    for mod in sorted(set(counter.layers) | set(counter.hosts)):
        ls, hs = counter.layers.get(mod, []), counter.hosts.get(mod, [])
        print(
            f"  {mod:<14} {len(ls):9d} {sum(b for b, _ in ls) / 1e9:9.3f} {sum(s for _, s in ls):8.2f} "
            f"{len(hs):11d} {sum(b for b, _ in hs) / 1e9:8.3f} {sum(s for _, s in hs):7.2f}"
        )
    print(f"  kt-kernel layers built in all: {sum(len(v) for v in counter.layers.values())}")


def part2(cores: int | None, threads: tuple[int, ...], full_layers: bool, repeats: int = 1) -> None:
    import psutil

    from kttune.kernels.expert_weights import make_writer
    from kttune.probes import gpu_pipeline
    from kttune.probes.common import probe_thread_counts
    from kttune.probes.gpu_common import shapes_for

    if cores is None:
        cores = gpu_pipeline._cores()
    ts = probe_thread_counts(cores, True, threads)
    # threads above this VM's cores would oversubscribe it: build with at most its cores, and say so
    here = gpu_pipeline._cores()
    cap = None if full_layers else gpu_pipeline.QUICK_LAYER_BYTES
    print(
        f"\npart 2: the quick pipeline's host-side builds, planned for {cores} cores: threads {ts}, "
        f"host layers {'whole' if cap is None else f'capped at {cap / GIB:.1f} GiB'}"
        + (f" (built here with min(threads, {here}) workers)" if max(ts) > here else "")
    )
    rows = []
    shapes = shapes_for(None)
    for shape in shapes.moe + shapes.pipeline_only:  # the narrow layers too, since 2026-12-05
        experts = gpu_pipeline.layer_experts(shape, cap)
        nbytes = experts * gpu_pipeline.expert_stream_bytes(shape)
        free = psutil.virtual_memory().available
        # a layer that does not fit in free RAM here (host copy + kt-kernel's copy): build the part of
        # it that a quick probe builds, and scale its times by the bytes (marked ~)
        built = (
            experts if 2.3 * nbytes <= 0.8 * free else gpu_pipeline.layer_experts(shape, gpu_pipeline.QUICK_LAYER_BYTES)
        )
        scale = experts / built
        t0 = time.perf_counter()
        host = expert_weights.HostExperts.random(shape.method, shape.hidden, shape.inter, built)
        t_host = (time.perf_counter() - t0) * scale
        builds = []
        for t in ts if scale == 1 else ts[:1]:
            best = float("inf")
            for _ in range(repeats):  # the fastest of `repeats` builds: other load only slows a build down
                t0 = time.perf_counter()
                writer, _ = make_writer(host, min(t, here))
                best = min(best, time.perf_counter() - t0)
                writer.close()
                gc.collect()
            builds.append(best * scale)
        builds = builds * (len(ts) // len(builds))
        del host
        gc.collect()
        rows.append((shape, experts, nbytes, t_host, builds, scale != 1))
    total_layers, total_s, estimated = 0, 0.0, False
    print(f"  {'shape':<26} {'experts':>9} {'layer GB':>8} {'host s':>7} {'kt layers':>9} {'build s':>8}")
    for shape, experts, nbytes, t_host, builds, scaled in rows:
        estimated |= scaled
        mark = "~" if scaled else " "
        total_layers += len(builds)
        total_s += t_host + sum(builds)
        print(
            f"  {shape.name + ' ' + shape.method:<26} {experts:4d}/{shape.experts:<4d} {nbytes / 1e9:8.2f} "
            f"{mark}{t_host:6.1f} {len(builds):9d} {mark}{sum(builds):7.1f}"
        )
    print(
        f"  kt-kernel writer layers: {total_layers}; host + layer build time {'~' if estimated else ''}{total_s:.1f} s"
        + (
            "  (~: did not fit in free RAM here; a 2 GiB part was built once and its times scaled by the bytes)"
            if estimated
            else ""
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", type=int, choices=(1, 2), default=None, help="run one part only")
    ap.add_argument("--cores", type=int, default=None, help="part 2: plan the thread counts for this many cores")
    ap.add_argument("--threads", default="", help="part 2: comma-separated thread counts (as --threads)")
    ap.add_argument("--full-layers", action="store_true", help="part 2: whole layers (the quick probe before the cap)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="part 2: builds per layer, the fastest counts (each build keeps its RAM: see above)",
    )
    args = ap.parse_args()
    if args.part in (None, 1):
        part1()
    if args.part in (None, 2):
        part2(args.cores, tuple(int(t) for t in args.threads.split(",") if t), args.full_layers, args.repeats)


if __name__ == "__main__":
    main()
