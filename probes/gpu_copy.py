"""Host<->GPU copy bandwidth: H2D and D2H, pinned (NUMA-local to the GPU) and pageable, from 1 MB to
one full MoE layer, per GPU and on all GPUs at once.

Pinned buffers are allocated with the process bound to the GPU's NUMA node (`bound_to_node`), so
cudaHostAlloc's first touch places them there. Each copy is timed with CUDA events on a dedicated
stream; "all GPUs" launches one copy per GPU at once and times the slowest with the host clock after
synchronising every device. Each point's `extra` carries GB/s and the ratio to the link's theoretical
rate (`pcie_theoretical_gbps`, raw after line coding: Gen5 x16 = 63.0 GB/s).
"""

from __future__ import annotations

import time

from kttune.hw.profile import Curve, Point
from kttune.probes.common import NullReporter, Reporter, quantiles
from kttune.probes.gpu_common import bound_to_node, cuda_time_point, gpu_numa_node, pcie_theoretical_gbps
from kttune.units import GIB, MIB


def copy_sizes(max_bytes: int, quick: bool = False) -> list[int]:
    """1 MB, 4 MB, 16 MB, ... (x4; x16 in quick mode) up to and including `max_bytes`."""
    step = 16 if quick else 4
    sizes = []
    s = MIB
    while s < max_bytes:
        sizes.append(s)
        s *= step
    sizes.append(int(max_bytes))
    return sizes


def link_info(index: int, inventory=None) -> dict:
    """PCIe gen/width (current and max) of GPU `index` from the inventory, else NVML."""
    info = {"gen": None, "width": None, "gen_max": None, "width_max": None, "numa": None}
    gpus = getattr(inventory, "gpus", ()) or ()
    for g in gpus:
        if g.index == index:
            info.update(
                gen=g.pcie_gen, width=g.pcie_width, gen_max=g.pcie_gen_max, width_max=g.pcie_width_max, numa=g.numa_node
            )
    if info["gen"] is None or info["width"] is None:
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            info["gen"] = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)
            info["width"] = pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)
            info["gen_max"] = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)
            info["width_max"] = pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
        except Exception:
            pass
    if info["numa"] is None:
        info["numa"] = gpu_numa_node(index)
    return info


def _theoretical(info: dict) -> float | None:
    # The idle link may have trained down to save power (gen 1 at idle is common): rate the copy
    # against the link's maximum, which it runs at under load.
    return pcie_theoretical_gbps(info.get("gen_max") or info.get("gen"), info.get("width_max") or info.get("width"))


def _extra(nbytes: int, ms: float, theo: float | None) -> dict:
    gbps = nbytes / (ms * 1e-3) / 1e9 if ms > 0 else 0.0
    e = {"gbps": round(gbps, 3)}
    if theo:
        e["link_theoretical_gbps"] = round(theo, 3)
        e["ratio_to_theoretical"] = round(gbps / theo, 4)
    return e


def probe_copy_gpu(
    index: int,
    max_bytes: int,
    *,
    quick: bool = False,
    inventory=None,
    reporter: Reporter | None = None,
) -> list[Curve]:
    """H2D and D2H curves, pinned and pageable, for one GPU."""
    import torch

    rep = reporter or NullReporter()
    info = link_info(index, inventory)
    theo = _theoretical(info)
    dev = torch.device("cuda", index)
    sizes = copy_sizes(max_bytes, quick)
    curves: list[Curve] = []
    free_dev, _ = torch.cuda.mem_get_info(dev)
    skipped: list[dict] = []
    if max_bytes > 0.8 * free_dev:
        sizes = [s for s in sizes if s <= 0.8 * free_dev]
        skipped.append(
            {"x": max_bytes, "reason": f"needs {max_bytes / GIB:.1f} GiB on GPU {index}, {free_dev / GIB:.1f} free"}
        )
    top = max(sizes)
    with bound_to_node(info["numa"]) as bound:
        pinned = torch.empty(top, dtype=torch.uint8, pin_memory=True)
        pinned.fill_(1)  # touch every page while bound to the node
        pageable = torch.empty(top, dtype=torch.uint8)
        pageable.fill_(1)
        gpu = torch.empty(top, dtype=torch.uint8, device=dev)
        gpu.fill_(2)
        stream = torch.cuda.Stream(dev)
        for direction in ("h2d", "d2h"):
            for is_pinned, host in ((True, pinned), (False, pageable)):
                pts: list[Point] = []
                for n in sizes:
                    rep.step(f"{direction} {'pinned' if is_pinned else 'pageable'} GPU{index} {n / MIB:.0f} MB", 0)
                    h, g = host[:n], gpu[:n]
                    if direction == "h2d":
                        fn = (
                            (lambda g=g, h=h: g.copy_(h, non_blocking=True))
                            if is_pinned
                            else (lambda g=g, h=h: g.copy_(h))
                        )
                    else:
                        fn = (
                            (lambda g=g, h=h: h.copy_(g, non_blocking=True))
                            if is_pinned
                            else (lambda g=g, h=h: h.copy_(g))
                        )
                    with torch.cuda.device(dev):
                        if is_pinned:
                            p = cuda_time_point(fn, x=n, stream=stream, repeats=5, min_total_ms=100, max_repeats=30)
                        else:
                            # pageable copies block the host: time them with the host clock
                            p = _host_timed(fn, x=n, dev=dev, repeats=3 if n > GIB else 5)
                    pts.append(Point(p.x, p.t_ms, p.t_ms_p10, p.t_ms_p90, p.n, _extra(n, p.t_ms, theo)))
                curves.append(
                    Curve(
                        kind=direction,
                        x_unit="bytes",
                        points=tuple(pts),
                        params={
                            "gpu": index,
                            "pinned": is_pinned,
                            "numa": bound if bound is not None else info["numa"],
                        },
                        backend="torch-cuda copy_"
                        + (" (cudaMemcpyAsync, events)" if is_pinned else " (pageable, host clock)"),
                        skipped=tuple(skipped),
                    )
                )
        del pinned, pageable, gpu
    torch.cuda.empty_cache()
    return curves


def _host_timed(fn, *, x: float, dev, repeats: int = 5, min_total_ms: float = 100.0, max_repeats: int = 20) -> Point:
    import torch

    fn()
    torch.cuda.synchronize(dev)
    samples: list[float] = []
    while len(samples) < repeats or (sum(samples) < min_total_ms and len(samples) < max_repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize(dev)
        samples.append((time.perf_counter() - t0) * 1e3)
    p10, med, p90 = quantiles(samples)
    return Point(x=x, t_ms=med, t_ms_p10=p10, t_ms_p90=p90, n=len(samples))


def probe_copy_all(
    max_bytes: int, *, quick: bool = False, inventory=None, reporter: Reporter | None = None
) -> list[Curve]:
    """Pinned H2D and D2H on every GPU at once (one stream per GPU, host buffers NUMA-local to each):
    the aggregate bandwidth. x = bytes per GPU; extra gbps = aggregate over all GPUs."""
    import torch

    n_gpu = torch.cuda.device_count()
    if n_gpu < 2:
        return []
    infos = [link_info(i, inventory) for i in range(n_gpu)]
    theo = sum(_theoretical(i) or 0 for i in infos) or None
    sizes = [s for s in copy_sizes(max_bytes, quick) if s >= 16 * MIB]
    top = max(sizes)
    hosts, gpus, streams = [], [], []
    for i, info in enumerate(infos):
        with bound_to_node(info["numa"]):
            h = torch.empty(top, dtype=torch.uint8, pin_memory=True)
            h.fill_(1)
        hosts.append(h)
        gpus.append(torch.empty(top, dtype=torch.uint8, device=f"cuda:{i}"))
        streams.append(torch.cuda.Stream(f"cuda:{i}"))
    curves = []
    for direction in ("h2d", "d2h"):
        pts = []
        for n in sizes:

            def run(n=n):
                for i in range(n_gpu):
                    with torch.cuda.stream(streams[i]):
                        if direction == "h2d":
                            gpus[i][:n].copy_(hosts[i][:n], non_blocking=True)
                        else:
                            hosts[i][:n].copy_(gpus[i][:n], non_blocking=True)
                for i in range(n_gpu):
                    streams[i].synchronize()

            run()
            samples = []
            for _ in range(5):
                t0 = time.perf_counter()
                run()
                samples.append((time.perf_counter() - t0) * 1e3)
            p10, med, p90 = quantiles(samples)
            pts.append(Point(n, med, p10, p90, len(samples), _extra(n * n_gpu, med, theo) | {"gpus": n_gpu}))
        curves.append(
            Curve(
                kind=direction,
                x_unit="bytes",
                points=tuple(pts),
                params={"gpu": "all", "pinned": True, "numa": [i["numa"] for i in infos]},
                backend=f"torch-cuda copy_ on {n_gpu} GPUs at once (host clock)",
            )
        )
    hosts.clear()  # the buffers go before the cache is emptied
    gpus.clear()
    torch.cuda.empty_cache()
    return curves


def probe_copy(max_bytes: int, *, quick: bool = False, inventory=None, reporter: Reporter | None = None) -> list[Curve]:
    """Every GPU on its own, then all GPUs at once (when there are several)."""
    import torch

    curves: list[Curve] = []
    for i in range(torch.cuda.device_count()):
        curves += probe_copy_gpu(i, max_bytes, quick=quick, inventory=inventory, reporter=reporter)
    curves += probe_copy_all(max_bytes, quick=quick, inventory=inventory, reporter=reporter)
    return curves
