"""Host RAM that real kt-kernel MoE objects allocate, as a function of max_len (the chunk), layers,
experts and method: reserved address space (growth of the process's mappings, as VmSize counts them less glibc's
PROT_NONE arena reservations) right after construction, and resident
memory (VmRSS growth) after one forward of max_len tokens. Each point runs in a fresh Python process,
so kt-kernel's process-wide shared scratch starts empty.

Entry points: `measure_point(shape, max_len)` (in this process), `run_point(shape, max_len)` (in a
fresh process; `shape` a `kttune.spec.moe_shape.MoeLayerShape` with its method),
`probe_host_ram(...)` (a series, as one `host_ram` curve per (method, shape, layers) for the profile),
`plan_host_ram(...)` / `run_host_ram_step(...)` (the step `kttune probe` runs: points that cannot run
are skipped with a note), and `python -m kttune.probes.host_ram --method BF16 --chunks 256,1024 ...`
(prints JSON).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from kttune.hw.profile import Curve, Point
from kttune.memory.host import kt_allocation_bytes
from kttune.probes.common import NullReporter, Reporter
from kttune.probes.cpu_moe import available_ram_bytes, host_bytes_needed
from kttune.spec.moe_shape import MoeLayerShape
from kttune.units import GIB, MIB


@dataclass(frozen=True)
class HostRamPoint:
    """What one fresh process measured building `layers` kt-kernel layers of `shape` (its method)."""

    shape: MoeLayerShape  # with the method built
    kernel: str  # the kt-kernel class that built them
    max_len: int  # tokens per forward the layers were built for
    layers: int
    threads: int
    reserved_bytes: int  # growth of mapped (non-PROT_NONE) address space from building the layers
    resident_bytes: int  # VmRSS growth after building them and one forward of max_len tokens
    weights_source_bytes: int  # the caller's source weights (allocated before the baseline)
    build_ms: float = 0.0  # wall time of building the layers (weights load included)

    def to_dict(self) -> dict[str, Any]:
        """Flat, as the point's process prints it: method, kernel, hidden, inter, experts, top_k, ..."""
        s = self.shape
        return {
            "method": s.method,
            "kernel": self.kernel,
            "hidden": s.hidden,
            "inter": s.inter,
            "experts": s.experts,
            "top_k": s.top_k,
            "max_len": self.max_len,
            "layers": self.layers,
            "threads": self.threads,
            "reserved_bytes": self.reserved_bytes,
            "resident_bytes": self.resident_bytes,
            "weights_source_bytes": self.weights_source_bytes,
            "build_ms": self.build_ms,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HostRamPoint":
        shape = MoeLayerShape(
            hidden=d["hidden"], inter=d["inter"], experts=d["experts"], top_k=d["top_k"], method=d["method"]
        )
        return cls(
            shape,
            d["kernel"],
            d["max_len"],
            d["layers"],
            d["threads"],
            d["reserved_bytes"],
            d["resident_bytes"],
            d["weights_source_bytes"],
            d.get("build_ms", 0.0),
        )


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _mapped_rw_bytes() -> int:
    """Bytes of readable or writable mappings (/proc/self/maps). VmSize also counts the PROT_NONE
    reservations glibc makes for each new thread's malloc arena (64 MiB each), which are address
    space nobody allocated; they are left out here."""
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            addr, perms = line.split()[:2]
            if perms.startswith("---"):
                continue
            lo, hi = (int(a, 16) for a in addr.split("-"))
            total += hi - lo
    return total


def _vm() -> tuple[int, int]:
    return _mapped_rw_bytes(), _status_kib("VmRSS") * 1024


def measure_point(shape: MoeLayerShape, max_len: int, layers: int = 1, threads: int = 1) -> HostRamPoint:
    """Build `layers` kt-kernel MoE layers of `shape` (its method) with max_len `max_len` in this process and
    measure what they allocate. Call it in a fresh process (`run_point`): kt-kernel's shared scratch
    keeps the largest request the process ever made."""
    import torch

    from kttune.kernels.expert_weights import HostExperts
    from kttune.kernels.kt_ext import load_kt_kernel, quiet_stdout
    from kttune.kernels.kt_moe import KtMoeLayer
    from kttune.kernels.kt_pool import cpu_infer

    kt = load_kt_kernel()
    if kt is None:
        raise RuntimeError("kt-kernel is not importable")
    method, hidden, inter, experts, top_k = shape.method, shape.hidden, shape.inter, shape.experts, shape.top_k
    weights = [HostExperts.random(method, hidden, inter, experts, seed=i) for i in range(layers)]
    x = torch.randn(max_len, hidden).to(torch.bfloat16)
    ids = torch.randint(0, experts, (max_len, top_k), dtype=torch.int64)
    w = torch.full((max_len, top_k), 1.0 / top_k, dtype=torch.float32)
    out = torch.empty(max_len, hidden, dtype=torch.bfloat16)
    with quiet_stdout():
        cpu_infer(kt.ext, threads, 1, [0])  # the worker pool exists before the baseline
    vms0, rss0 = _vm()
    t0 = time.perf_counter()
    built = [KtMoeLayer(wt, top_k=top_k, threads=threads, max_tokens=max_len, kt=kt) for wt in weights]
    build_ms = (time.perf_counter() - t0) * 1e3
    vms1, _ = _vm()
    for layer in built:
        layer.forward(x, ids, w, out)
    _, rss2 = _vm()
    return HostRamPoint(
        shape=shape,
        kernel=built[0].kernel_class,
        max_len=max_len,
        layers=layers,
        threads=threads,
        reserved_bytes=vms1 - vms0,
        resident_bytes=rss2 - rss0,
        weights_source_bytes=sum(wt.nbytes for wt in weights),
        build_ms=build_ms,
    )


def run_point(
    shape: MoeLayerShape, max_len: int, layers: int = 1, threads: int = 1, timeout_s: float = 600
) -> HostRamPoint:
    """`measure_point` in a fresh Python process."""
    args = [
        sys.executable,
        "-m",
        "kttune.probes.host_ram",
        "--one",
        "--method",
        shape.method,
        "--hidden",
        str(shape.hidden),
        "--inter",
        str(shape.inter),
        "--experts",
        str(shape.experts),
        "--top-k",
        str(shape.top_k),
        "--chunks",
        str(max_len),
        "--layers",
        str(layers),
        "--threads",
        str(threads),
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise RuntimeError(f"host RAM point failed: {last}")
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    return HostRamPoint.from_dict(json.loads(lines[-1]))


def predicted_bytes(p: HostRamPoint) -> int:
    """kttune.memory.host's prediction of what `p` measured (AMX layouts for an AMX class)."""
    return kt_allocation_bytes(p.shape, p.max_len, p.layers, amx=p.kernel.startswith("AMX"))


def host_ram_curve(points: Sequence[HostRamPoint], skipped: Sequence[dict] = ()) -> Curve:
    """One `host_ram` profile curve: x = max_len, t_ms = the time building the layers took, extra =
    reserved/resident/predicted bytes; `skipped` the max_lens that could not run, with reasons."""
    p0, s0 = points[0], points[0].shape
    pts = tuple(
        Point(
            x=p.max_len,
            t_ms=max(p.build_ms, 1e-3),
            n=1,
            extra={
                "reserved_bytes": p.reserved_bytes,
                "resident_bytes": p.resident_bytes,
                "predicted_bytes": predicted_bytes(p),
            },
        )
        for p in sorted(points, key=lambda q: q.max_len)
    )
    return Curve(
        "host_ram",
        "tokens",
        pts,
        {
            "method": s0.method,
            "hidden": s0.hidden,
            "inter": s0.inter,
            "experts": s0.experts,
            "top_k": s0.top_k,
            "layers": p0.layers,
            "threadpools": 1,
            "kernel": p0.kernel,
        },
        backend=f"kt-kernel:{p0.kernel}",
        skipped=tuple(skipped),
    )


def probe_host_ram(
    methods: Sequence[str],
    shape: MoeLayerShape,
    chunks: Sequence[int],
    layers: int = 1,
    threads: int = 1,
    progress: Any = None,
) -> list[Curve]:
    """The probe step: one fresh process per (method, chunk); one curve per method."""
    curves = []
    for method in methods:
        pts = []
        for n in chunks:
            pts.append(run_point(shape.with_method(method), n, layers, threads))
            if progress is not None:
                progress(method, n)
        curves.append(host_ram_curve(pts))
    return curves


# ---- the `kttune probe` step ---------------------------------------------------------------------

# max_len series: quick stays at the small expert shape's few-second cost (two fresh processes per
# method); full reaches the chunks where kt-kernel's reservation was seen to grow (docs/memory.md).
QUICK_CHUNKS = (256, 1024)
FULL_CHUNKS = (1024, 4096, 16384)
# One layer's source weights stay under this (fewer experts; the scratch that grows with max_len
# depends on E only through E x M_STEP rows): quick mode's points stay seconds, the full mode's a
# minute at most on a 16-core host, instead of building a 17 GB bf16 Kimi-K2 layer per point.
QUICK_LAYER_BYTES = 512 * MIB
FULL_LAYER_BYTES = 4 * GIB
# Methods the quick step measures, the first the host runs: the int4 Kimi-K2 / DeepSeek format first.
QUICK_METHOD_ORDER = ("RAWINT4", "BF16", "FP8", "AMXINT4", "AMXINT8")


@dataclass(frozen=True)
class HostRamPlan:
    """The host-RAM step of `kttune probe`: one fresh process per (method, max_len), `threads`
    kt-kernel workers (the forward that makes the scratch resident runs on them), one layer."""

    shape: MoeLayerShape
    methods: tuple[str, ...]
    chunks: tuple[int, ...]
    threads: int = 1
    layers: int = 1
    ram_fraction: float = 0.7  # of the RAM available before each point
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def steps(self) -> int:
        return len(self.methods) * len(self.chunks)


def plan_host_ram(
    shape: MoeLayerShape, methods: Sequence[str], quick: bool, threads: int = 1, chunks: Sequence[int] = ()
) -> HostRamPlan:
    """The step's plan for `shape` (the model's or a representative one) and `methods` (those the
    CPU MoE probe runs here; quick mode keeps one). Without kt-kernel the plan is empty, with a note.
    It measures fewer experts (at least 2 x top-k, with a note) when a layer's source weights would
    exceed `QUICK_LAYER_BYTES` / `FULL_LAYER_BYTES`; the curve records the E measured."""
    from kttune.kernels.expert_weights import expert_nbytes
    from kttune.extras import KT_KERNEL_INSTALL
    from kttune.kernels.kt_ext import kt_kernel_error, load_kt_kernel

    chunks = tuple(chunks) or (QUICK_CHUNKS if quick else FULL_CHUNKS)
    if load_kt_kernel() is None:
        return HostRamPlan(
            shape,
            (),
            chunks,
            threads,
            notes=(f"host RAM step skipped: kt-kernel is not importable ({kt_kernel_error()}); {KT_KERNEL_INSTALL}",),
        )
    methods = tuple(methods)
    if quick and len(methods) > 1:
        methods = tuple(m for m in QUICK_METHOD_ORDER if m in methods)[:1] or methods[:1]
    notes: list[str] = []
    if methods:
        per = max(expert_nbytes(m, shape.hidden, shape.inter) for m in methods)
        e = max(2 * shape.top_k, min(shape.experts, (QUICK_LAYER_BYTES if quick else FULL_LAYER_BYTES) // per))
        if e < shape.experts:
            notes.append(
                f"host RAM step builds {e} of {shape.experts} experts: the scratch that grows with "
                "max_len depends on E only through E x M_STEP rows"
            )
            shape = shape.with_experts(e)
    return HostRamPlan(shape, methods, chunks, max(1, threads), notes=tuple(notes))


def run_host_ram_step(plan: HostRamPlan, reporter: Reporter | None = None) -> list[Curve]:
    """Measure `plan`: one `host_ram` curve per method with at least one point. A point that cannot
    run (not enough RAM, kt-kernel failing in its process) is skipped with a one-line note and
    recorded in the curve's `skipped`; the other points and methods go on."""
    reporter = reporter or NullReporter()
    for n in plan.notes:
        reporter.note(n)
    s = plan.shape
    curves = []
    for method in plan.methods:
        pts: list[HostRamPoint] = []
        skipped: list[dict] = []
        for n in plan.chunks:
            label = f"host_ram {method} max_len {n}"
            weights, scratch = host_bytes_needed(method, s, n)
            need = plan.layers * weights + scratch
            usable = int(available_ram_bytes() * plan.ram_fraction)
            reason = ""
            if need > usable:
                reason = f"needs about {need / GIB:.1f} GiB, {usable / GIB:.1f} GiB usable"
            else:
                try:
                    p = run_point(s.with_method(method), n, plan.layers, plan.threads)
                except Exception as e:  # noqa: BLE001 - one point's failure leaves the others standing
                    reason = f"{type(e).__name__}: {e}".splitlines()[0]
            if reason:
                skipped.append({"x": n, "reason": reason})
                reporter.note(f"{label} skipped: {reason}")
                reporter.step(f"{label}: skipped")
                continue
            pts.append(p)
            reporter.step(f"{label}: reserved {p.reserved_bytes / MIB:.0f} MiB")
        if pts:
            curves.append(host_ram_curve(pts, skipped))
    return curves


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="BF16")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--inter", type=int, default=512)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--chunks", default="256,1024")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--one", action="store_true", help="measure in this process (used by run_point)")
    a = ap.parse_args(argv)
    chunks = [int(c) for c in a.chunks.split(",")]
    shape = MoeLayerShape(hidden=a.hidden, inter=a.inter, experts=a.experts, top_k=a.top_k, method=a.method)
    if a.one:
        p = measure_point(shape, chunks[0], a.layers, a.threads)
        print(json.dumps(p.to_dict()))
        return
    for n in chunks:
        p = run_point(shape, n, a.layers, a.threads)
        print(json.dumps({**p.to_dict(), "predicted_bytes": predicted_bytes(p)}))


if __name__ == "__main__":
    main()
