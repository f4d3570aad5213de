"""Where the spread of one configuration's measurement comes from (issue 21's CV at 5 positions).

One runner session (in process), one configuration measured many times in three orders:

1. back to back: the configuration alone, `--n` samples;
2. interleaved: the configuration among others (other GPU-expert counts and thread counts, as the
   grid runs them), in a seeded random order per round;
3. interleaved, re-warmed: as 2, with one untimed run of the configuration's first length right
   before each timed sample.

Then 1 again on a second session holding only the configuration's own kt-kernel pool (are the
parked pools of the other thread counts a cause?).

Each sample records, per prompt length, the wall time of the K layers and their attention / MoE
split, beside the host's load average, the process's CPU time, the GPU's SM clock and temperature
(NVML) and the Python GC's collection counts: a drift shows which part moves with what.

    python benchmarks/diag/diag_cv.py --out $OUT/cv.json       # the GPU box (about 2 minutes)
    python benchmarks/diag/diag_cv.py --small --out /tmp/cv.json  # anywhere (CPU variant)
    python benchmarks/diag/diag_cv.py --report a.json b.json > cv-diag.md  # the table of runs
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def gpu_state() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temp_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
        }
    except Exception as e:  # no NVML here
        return {"error": type(e).__name__}


def cpu_mhz() -> float | None:
    try:
        xs = [float(line.split(":")[1]) for line in open("/proc/cpuinfo") if line.startswith("cpu MHz")]
        return round(sum(xs) / len(xs), 1) if xs else None
    except OSError:
        return None


def thread_ns() -> dict:
    """CPU time on core (ns) of each thread of this process, by tid (/proc/self/task/*/schedstat)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0])
        except OSError:
            pass
    return out


def placement(before: dict, after: dict, wall_s: float) -> dict:
    """Where this process's busy threads ran during a sample: for each thread on core over half the
    sample's wall time, the CPU it last ran on and how many CPUs its affinity allows; the CPUs that
    two or more of them last shared; the host's steal time over the sample is in `steal_share`."""
    rows = []
    for tid, ns in after.items():
        if (ns - before.get(tid, 0)) / 1e9 < 0.5 * wall_s:
            continue
        cpu = _last_cpu(int(tid))
        try:
            allowed = len(os.sched_getaffinity(int(tid)))
        except OSError:
            continue
        if cpu is not None:
            rows.append((cpu, allowed))
    cpus = [c for c, _ in rows]
    return {
        "busy_threads": len(rows),
        "pinned": sum(1 for _, n in rows if n == 1),
        "shared_cpus": sorted({c for c in cpus if cpus.count(c) > 1}),
    }


def steal() -> tuple[int, int]:
    with open("/proc/stat") as f:
        xs = [int(x) for x in f.readline().split()[1:]]
    return (xs[7] if len(xs) > 7 else 0), sum(xs)


def pin_busy_threads(before: dict, after: dict, wall_s: float, cores: list[int]) -> int:
    """Pin the threads on core over half of a sample's wall time (kt-kernel's workers) one to a
    core of `cores`, in tid order; returns how many were pinned."""
    busy = sorted(int(t) for t, ns in after.items() if (ns - before.get(t, 0)) / 1e9 >= 0.5 * wall_s)
    busy = [t for t in busy if t != threading.get_native_id()]
    for tid, core in zip(busy, cores):
        try:
            os.sched_setaffinity(tid, {core})
        except OSError:
            pass
    return min(len(busy), len(cores))


def system_busy() -> tuple[int, int]:
    with open("/proc/stat") as f:
        xs = [int(x) for x in f.readline().split()[1:]]
    return sum(xs) - xs[3] - xs[4], sum(xs)


def alloc_stats() -> dict:
    """The CUDA caching allocator's counters that a rebuild or a fragmented pool would move."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {}
        m = torch.cuda.memory_stats()
        keys = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams")
        return {k: m.get(k, 0) for k in keys} | {
            "reserved_mib": round(m.get("reserved_bytes.all.current", 0) / 2**20, 1),
            "allocated_mib": round(m.get("allocated_bytes.all.current", 0) / 2**20, 1),
            "segments": m.get("segment.all.current", 0),
        }
    except Exception as e:
        return {"error": type(e).__name__}


def attn_probe(sess, tokens: int, repeats: int = 5) -> dict:
    """Layer 0's attention block alone at `tokens` (no prefix), on the session's own weights: the
    wall time between syncs (as the runner's `attn` phase) and the device time between CUDA events.
    Bimodal wall with steady events says the host side moves; both moving says the device does."""
    import torch

    from kttune.kernels.decoder import AttnCache, attention_block

    st = sess.stack
    layer = st.layers[0]
    dev = layer.w.post_norm.device
    cuda = dev.type == "cuda"
    g = torch.Generator(device=dev).manual_seed(1)
    x0 = torch.randn(tokens, st.spec.hidden_size, generator=g, device=dev, dtype=torch.bfloat16).mul_(0.5)
    pos = torch.arange(tokens, device=dev)
    walls, events, queued, enqueue = [], [], [], []
    for i in range(2 + repeats):
        if cuda:  # the same block queued behind a 50 ms device sleep: every launch is enqueued before
            # the device starts, so the events time the device alone, without host launch gaps
            x = x0.clone()
            cache = AttnCache(capacity=tokens)
            torch.cuda.synchronize(dev)
            q0, q1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(100_000_000)
            h0 = time.perf_counter()
            q0.record()
            attention_block(layer.attn, layer.w, x, pos, cache, st.router, st.spec.top_k)
            q1.record()
            h1 = time.perf_counter()  # the host's launch time (a sync inside the block shows as ~50 ms)
            torch.cuda.synchronize(dev)
            if i >= 2:
                queued.append(q0.elapsed_time(q1))
                enqueue.append((h1 - h0) * 1e3)
        x = x0.clone()
        cache = AttnCache(capacity=tokens)
        if cuda:
            torch.cuda.synchronize(dev)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        w0 = time.perf_counter()
        if cuda:
            e0.record()
        attention_block(layer.attn, layer.w, x, pos, cache, st.router, st.spec.top_k)
        if cuda:
            e1.record()
            torch.cuda.synchronize(dev)
        w1 = time.perf_counter()
        if i >= 2:
            walls.append((w1 - w0) * 1e3)
            events.append(e0.elapsed_time(e1) if cuda else 0.0)
    return {
        "tokens": tokens,
        "wall_ms": round(statistics.median(walls), 3),
        "event_ms": round(statistics.median(events), 3),
        "queued_event_ms": round(statistics.median(queued), 3) if queued else None,
        "enqueue_ms": round(statistics.median(enqueue), 3) if enqueue else None,
        "wall_range": [round(min(walls), 3), round(max(walls), 3)],
        "main_cpu": _last_cpu(threading.get_native_id()),
        "main_affinity": len(os.sched_getaffinity(0)),
    }


class Metronome:
    """Fixed reference work timed right before a sample, one channel per part of the host a
    configuration's time can ride on: `py_ms` a single-thread pure-Python loop (the driving
    thread's speed), `launch_ms` the host time of 400 tiny CUDA launches (the launch rate the
    attention block and the layerwise loop lean on), `mem_ms` a 64 MiB host copy (the memory
    bandwidth stage A writes with), `kt_ms` one kt-kernel MoE call of 512 tokens, uniform routing,
    on the configuration's own workers. Each is the median of 3 after one untimed call. A channel
    that follows the samples' drift names the part of the host that moves."""

    def __init__(self, sess) -> None:
        import torch

        from diag_common import layer_inputs

        st = sess.stack
        self.sess = sess
        self.dev = st.layers[0].w.post_norm.device
        self.cuda = self.dev.type == "cuda"
        m = min(512, sess.cpu_max_tokens)
        _, self.h_cpu, _, (self.ids, self.w) = layer_inputs(st, st.layers[0], m, self.dev.type)
        self.y = torch.empty(m, st.spec.hidden_size, dtype=torch.bfloat16)
        self.src = torch.ones(16 << 20, dtype=torch.float32)
        self.dst = torch.empty_like(self.src)
        self.tiny = torch.zeros(1, device=self.dev) if self.cuda else None

    @staticmethod
    def _median(fn, n: int = 3) -> float:
        from diag_common import timed_calls

        return round(timed_calls(fn, n), 4)

    def _py(self) -> None:
        x = 0
        for i in range(300_000):
            x += i

    def _launch(self) -> None:
        import torch

        torch.cuda.synchronize(self.dev)
        for _ in range(400):
            self.tiny.add_(1.0)

    def _kt(self, cfg) -> None:
        st = self.sess.stack
        ids = self.ids.masked_fill(self.ids < cfg.gpu_experts, -1).contiguous()
        st.cpu.forward(self.h_cpu, ids, self.w.contiguous(), self.y)

    def __call__(self, cfg) -> dict:
        import torch

        self.sess.configure(cfg)
        out = {
            "py_ms": self._median(self._py),
            "mem_ms": self._median(lambda: self.dst.copy_(self.src)),
            "launch_ms": self._median(self._launch) if self.cuda else None,
            "kt_ms": self._median(lambda: self._kt(cfg)) if self.sess.stack.cpu is not None else None,
        }
        if self.cuda:
            torch.cuda.synchronize(self.dev)
        return out


def _last_cpu(tid: int) -> int | None:
    """The CPU thread `tid` of this process last ran on (/proc/self/task/TID/stat, field 39)."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def pin_main_off_workers() -> list[int]:
    """Pin the calling (main) thread to the CPUs no single-CPU-pinned thread (kt-kernel's workers)
    holds; returns them (unchanged, and [], when every CPU is held)."""
    me = threading.get_native_id()
    held: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            aff = os.sched_getaffinity(int(tid))
        except OSError:
            continue
        if int(tid) != me and len(aff) == 1:
            held |= aff
    free = sorted(set(os.sched_getaffinity(0)) - held)
    if free:
        os.sched_setaffinity(0, free)
    return free


def sample(sess, cfg, lengths, phase: str, i: int, t0: float, metronome=None) -> dict:
    from kttune.search.measured import prefill_tok_s

    tick = metronome(cfg) if metronome is not None else None
    c0 = os.times()
    g0 = [s["collections"] for s in gc.get_stats()]
    per = []
    ms = {}
    busy = []
    allocs = []
    for n in lengths:
        sess.warm(cfg, n)
        m0 = alloc_stats()
        a0, s0, w0, st0 = thread_ns(), system_busy(), time.perf_counter(), steal()
        run = sess.sample(cfg, n)
        a1, s1, w1, st1 = thread_ns(), system_busy(), time.perf_counter(), steal()
        m1 = alloc_stats()
        allocs.append({"before": m0, "delta": {k: m1[k] - m0[k] for k in m0 if k in m1 and k != "error"}})
        d = sorted(((a1[t] - a0.get(t, 0)) / 1e6 for t in a1), reverse=True)
        busy.append(
            {
                "wall_ms": round((w1 - w0) * 1e3, 2),
                "process_cpu_ms": round(sum(d), 1),
                "threads_over_1ms": sum(1 for x in d if x > 1.0),
                "top_thread_ms": [round(x, 1) for x in d[:4]],
                "kt_like_threads_ms": [round(x, 1) for x in d[4:20]],
                "system_busy_share": round((s1[0] - s0[0]) / max(1, s1[1] - s0[1]), 3),
                "steal_share": round((st1[0] - st0[0]) / max(1, st1[1] - st0[1]), 4),
                "placement": placement(a0, a1, w1 - w0),
            }
        )

        ms[n] = run.extrapolated_ms
        per.append(
            {
                "tokens": n,
                "measured_ms": round(run.measured_ms, 3),
                "extrapolated_ms": round(run.extrapolated_ms, 2),
                "attn_ms": [round(sum(f.attn_ms), 3) for f in run.forwards],
                "moe_ms": [round(sum(f.moe_ms), 3) for f in run.forwards],
                "paths": list(run.paths),
            }
        )
    c1 = os.times()
    return {
        "phase": phase,
        "i": i,
        "t_s": round(time.perf_counter() - t0, 2),
        "tok_s": prefill_tok_s(ms, lengths, [1.0] * len(lengths)),
        "lengths": per,
        "cpu_user_s": round(c1.user - c0.user, 3),
        "cpu_sys_s": round(c1.system - c0.system, 3),
        "loadavg": os.getloadavg()[0],
        "cpu_mhz": cpu_mhz(),
        "gpu": gpu_state(),
        "gc": [s["collections"] - g for s, g in zip(gc.get_stats(), g0)],
        "busy": busy,
        "alloc": allocs,
        **({"metronome": tick} if tick is not None else {}),
    }


def block(sess, cfg, lengths, phase: str, i: int, t0: float, probe: bool, size: int = 3, metronome=None) -> list[dict]:
    """One block: `size` samples of `cfg` back to back (bench_tune's CV_REPEATS), each marked with
    its place in the block; after the last, the attention block alone (`attn_probe`) if `probe`."""
    out = []
    for j in range(size):
        s = sample(sess, cfg, lengths, phase, i, t0, metronome)
        s["block_sample"] = j
        if j == size - 1 and probe:
            s["attn_probe"] = attn_probe(sess, lengths[-1])
        out.append(s)
    return out


def cv(xs) -> float:
    return statistics.pstdev(xs) / statistics.mean(xs) if len(xs) > 1 else 0.0


def blocks_of(ss: list[dict]) -> list[list[dict]]:
    """The samples of a block phase by block (each sample's `i` is its block's index)."""
    return [list(g) for _, g in itertools.groupby(ss, key=lambda s: s["i"])]


def report(paths: list[str]) -> str:
    """Markdown tables of diag results: per file and phase, the samples' median, CV and range, the
    process's busy threads and CPU-ms per wall-ms during the timed runs; then, for the block phases,
    the CV of the block medians and within the blocks, and the attention block timed alone."""
    lines = [
        "| run | pipeline | phase | n | median tok/s | CV | min - max | busy threads | CPU-ms per wall-ms |",
        "|---|---|---|---:|---:|---:|---|---:|---:|",
    ]
    block_lines = [
        "| run | phase | blocks | CV of block medians | mean CV within a block | "
        "attention block alone, device ms (min - max) | queued behind a device sleep, ms | host launch, ms |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    for path in paths:
        d = json.loads(Path(path).read_text())
        pipe = d.get("backends", {}).get("layerwise_pipeline", "?")
        by: dict = {}
        for s in d["samples"]:
            by.setdefault(s["phase"], []).append(s)
        for phase, ss in by.items():
            v = [s["tok_s"] for s in ss]
            busy = [b for s in ss for b in s.get("busy", [])]
            threads = f"{statistics.median(b['threads_over_1ms'] for b in busy):.0f}" if busy else "-"
            ratio = f"{statistics.median(b['process_cpu_ms'] / b['wall_ms'] for b in busy):.1f}" if busy else "-"
            lines.append(
                f"| {Path(path).name} | {pipe} | {phase} | {len(v)} | {statistics.median(v):,.0f} | "
                f"{100 * cv(v):.1f}% | {min(v):,.0f} - {max(v):,.0f} | {threads} | {ratio} |"
            )
            if not any("block_sample" in s for s in ss):
                continue
            blocks = blocks_of(ss)
            medians = [statistics.median(s["tok_s"] for s in b) for b in blocks]
            within = [cv([s["tok_s"] for s in b]) for b in blocks if len(b) > 1]
            probes = [s["attn_probe"] for s in ss if s.get("attn_probe")]

            def span(key: str, probes=probes) -> str:
                xs = [p[key] for p in probes if p.get(key) is not None]
                return f"{min(xs):.2f} - {max(xs):.2f}" if xs else "-"

            block_lines.append(
                f"| {Path(path).name} | {phase} | {len(blocks)} | {100 * cv(medians):.1f}% | "
                f"{100 * statistics.mean(within) if within else 0:.1f}% | {span('event_ms')} | "
                f"{span('queued_event_ms')} | {span('enqueue_ms')} |"
            )
    out = "\n".join(lines) + "\n"
    if len(block_lines) > 2:
        out += "\n" + "\n".join(block_lines) + "\n"
    tick_lines = metronome_report(paths)
    if tick_lines:
        out += "\n" + tick_lines
    return out


CHANNELS = ("py_ms", "launch_ms", "mem_ms", "kt_ms")


def metronome_report(paths: list[str]) -> str:
    """For the samples with a metronome: each channel's spread (max / min) and its correlation with
    the sample's time (1 / tok/s); then the CV of the block medians of the time corrected by a
    least-squares fit on the channels, each block's correction fitted on the other blocks only
    (leave one block out), so a channel that merely fits noise does not lower it."""
    import numpy as np

    lines = [
        "| run | phase | blocks | CV of block medians, raw | "
        + " | ".join(f"{c}: max/min, r" for c in CHANNELS)
        + " | corrected by every channel (held-out blocks) | by kt_ms alone | by launch_ms alone |",
        "|---|---|---:|---:|" + "---|" * (len(CHANNELS) + 3),
    ]
    for path in paths:
        d = json.loads(Path(path).read_text())
        by: dict = {}
        for s in d["samples"]:
            if s.get("metronome"):
                by.setdefault(s["phase"], []).append(s)
        for phase, ss in by.items():
            chans = [c for c in CHANNELS if all(s["metronome"].get(c) is not None for s in ss)]
            t = np.array([1.0 / s["tok_s"] for s in ss])
            blocks = np.array([s["i"] for s in ss])
            cells = []
            for c in CHANNELS:
                if c not in chans:
                    cells.append("-")
                    continue
                m = np.array([s["metronome"][c] for s in ss])
                r = float(np.corrcoef(m, t)[0, 1]) if m.std() > 0 else 0.0
                cells.append(f"{m.max() / m.min():.2f}, {r:+.2f}")

            def held_out_cv(use: list[str]) -> str:
                if not use or len(set(blocks)) < 3:
                    return "-"
                x = np.column_stack([np.ones(len(ss))] + [[s["metronome"][c] for s in ss] for c in use])
                fixed = np.empty_like(t)
                for b in set(blocks):
                    train = blocks != b
                    coef, *_ = np.linalg.lstsq(x[train], t[train], rcond=None)
                    mean = x[train].mean(axis=0)
                    fixed[~train] = t[~train] - (x[~train] - mean)[:, 1:] @ coef[1:]
                med = [float(np.median(fixed[blocks == b])) for b in sorted(set(blocks))]
                return f"{100 * cv(med):.1f}%"

            raw = [float(np.median(t[blocks == b])) for b in sorted(set(blocks))]
            lines.append(
                f"| {Path(path).name} | {phase} | {len(raw)} | {100 * cv(raw):.1f}% | "
                + " | ".join(cells)
                + f" | {held_out_cv(chans)} | {held_out_cv([c for c in chans if c == 'kt_ms'])} | "
                f"{held_out_cv([c for c in chans if c == 'launch_ms'])} |"
            )
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


def main() -> None:
    if sys.argv[1:2] == ["--report"]:
        print(report(sys.argv[2:]), end="")
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--method", default="BF16")
    ap.add_argument("--config", default="46/16384/1216/13", help="gpu experts/chunk/threshold/threads")
    ap.add_argument("--others", default="0/16384/1024/13,46/16384/1024/15,47/8192/0/13,0/8192/4096/15")
    ap.add_argument("--lengths", default="3283,6059,11755")
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--skip-back-to-back", action="store_true")
    ap.add_argument(
        "--phases",
        default="back_to_back,interleaved,interleaved_rewarmed,back_to_back_one_pool",
        help="back_to_back, interleaved, interleaved_rewarmed, interleaved_settled, interleaved_same_threads, "
        "interleaved_other_threads, interleaved_torch_threads, back_to_back_one_pool, blocks (one other "
        "configuration, then three samples back to back: bench_tune's CV positions), blocks_pinned (blocks "
        "with kt-kernel's busy workers pinned one to a core), blocks_rebuilt (the session put at rest before "
        "each block of the configuration alone), blocks_alone (blocks of the configuration alone)",
    )
    ap.add_argument("--settle-s", type=float, default=1.0)
    ap.add_argument(
        "--pin-main",
        action="store_true",
        help="after the session is built, pin the main (driving) thread to the CPUs kt-kernel's pinned workers leave",
    )
    ap.add_argument(
        "--metronome",
        action="store_true",
        help="time fixed reference work (Python loop, CUDA launches, host copy, a kt-kernel call) before "
        "every sample of the configuration: which part of the host follows the drift (`Metronome`)",
    )
    ap.add_argument(
        "--pipeline", default="", help="the layerwise pipeline (a PipelineConfig label; default the runner's)"
    )
    a = ap.parse_args()

    from kttune.runner.session import RunnerConfig, RunnerSession, SessionSpec

    def rc(s: str) -> RunnerConfig:
        g, c, t, th = (int(x) for x in s.split("/"))
        return RunnerConfig(g, c, t, th)

    cfg = rc(a.config)
    others = [rc(s) for s in a.others.split(",") if s]
    lengths = [int(x) for x in a.lengths.split(",")]
    if a.small:
        cfg, others = RunnerConfig(4, 512, 256, 1), [RunnerConfig(0, 512, 0, 1), RunnerConfig(8, 256, 256, 1)]
        lengths = [300, 700]
    threads = tuple(sorted({cfg.threads, *(o.threads for o in others)}))
    common = dict(
        model=a.model,
        method=a.method,
        layers=2,
        max_tokens=max(min(max(x.chunk for x in [cfg, *others]), max(lengths)), 64),
        cpu_max_tokens=4096,
        device="cpu" if a.small else None,
        small=a.small,
        pipeline=a.pipeline,
    )
    out: dict = {"model": a.model, "method": a.method, "config": a.config, "lengths": lengths, "samples": []}
    t0 = time.perf_counter()

    def save():
        phases = {}
        for s in out["samples"]:
            phases.setdefault(s["phase"], []).append(s["tok_s"])
        out["summary"] = {
            p: {"n": len(v), "median": statistics.median(v), "cv": cv(v), "first": v[0], "last": v[-1]}
            for p, v in phases.items()
        }
        Path(a.out).write_text(json.dumps(out, indent=1))

    sess = RunnerSession(SessionSpec(threads=threads, **common), progress=lambda m: print(m, flush=True))
    out["backends"] = dict(sess.runner.backends)
    if a.pin_main:
        out["main_pinned_to"] = pin_main_off_workers()
        print(f"main thread pinned to CPUs {out['main_pinned_to']}", flush=True)
    tick = Metronome(sess) if a.metronome else None
    rng = random.Random(0)
    phases = a.phases.split(",")
    if a.skip_back_to_back:
        phases = [p for p in phases if p != "back_to_back"]
    for phase in phases:
        if phase == "back_to_back_one_pool":
            continue
        if phase == "blocks_pinned":  # kt-kernel's busy workers pinned one to a core, then blocks
            a0, w0 = thread_ns(), time.perf_counter()
            sess.sample(cfg, lengths[-1])
            cores = sorted(os.sched_getaffinity(0))[: cfg.threads]
            out["pinned_threads"] = pin_busy_threads(a0, thread_ns(), time.perf_counter() - w0, cores)
            print(f"pinned {out['pinned_threads']} busy threads to cores {cores}", flush=True)
        if phase in ("blocks_rebuilt", "blocks_alone"):
            # the configuration alone, 3 samples a block; blocks_rebuilt puts the session at rest
            # (resident experts and the layerwise slot released, the allocator's cache emptied)
            # before each block, so each block measures a fresh build with nothing else run between
            for i in range(a.n):
                if phase == "blocks_rebuilt":
                    sess.rest()
                out["samples"] += block(sess, cfg, lengths, phase, i, t0, probe=not a.small, metronome=tick)
            save()
            print(phase, out["summary"][phase], flush=True)
            continue
        if phase in ("blocks", "blocks_pinned"):
            # bench_tune's CV positions: one other configuration, then the configuration measured
            # 3 times back to back (bench_tune's CV_REPEATS); each block records what ran before it
            for i in range(a.n):
                prev = others[i % len(others)]
                for n in lengths:
                    if sess.skip_reason(prev, n) is None:
                        sess.sample(prev, n)
                after = f"{prev.gpu_experts}/{prev.chunk}/{prev.threshold}/{prev.threads}"
                out["samples"] += [
                    {**s, "after": after}
                    for s in block(sess, cfg, lengths, phase, i, t0, probe=not a.small, metronome=tick)
                ]
            save()
            print(phase, out["summary"][phase], flush=True)
            continue
        pool = {
            "interleaved": others,
            "interleaved_rewarmed": others,
            "interleaved_settled": others,
            "interleaved_same_threads": [o for o in others if o.threads == cfg.threads],
            "interleaved_other_threads": [o for o in others if o.threads != cfg.threads],
            "interleaved_torch_threads": others,
        }.get(phase, [])
        if phase == "interleaved_torch_threads":
            import torch

            torch.set_num_threads(max(1, (os.cpu_count() or 16) - cfg.threads))
        for i in range(a.n):
            order = [cfg, *pool]
            rng.shuffle(order)
            for c in order:
                if c == cfg:
                    if phase == "interleaved_rewarmed":
                        sess.runner.run_prompt(lengths[0], cfg.chunk, cfg.threshold, None)
                    if phase == "interleaved_settled":
                        sess.warm(cfg, lengths[0])
                        time.sleep(a.settle_s)
                    out["samples"].append(sample(sess, cfg, lengths, phase, i, t0, tick))
                else:
                    for n in lengths:
                        if sess.skip_reason(c, n) is None:
                            sess.sample(c, n)
        save()
        print(phase, out["summary"][phase], flush=True)
    out["stats"] = dict(sess.stats)
    sess.close()
    del sess
    gc.collect()
    if "back_to_back_one_pool" in phases:
        solo = RunnerSession(SessionSpec(threads=(cfg.threads,), **common), progress=lambda m: print(m, flush=True))
        for i in range(a.n):
            out["samples"].append(sample(solo, cfg, lengths, "back_to_back_one_pool", i, t0))
        solo.close()
    save()
    for p, s in out["summary"].items():
        print(f"{p}: n={s['n']} median {s['median']:.0f} tok/s, CV {100 * s['cv']:.1f}%", flush=True)


if __name__ == "__main__":
    main()
