"""A path-runner session: one model's K layers built once and measured under many configurations
(GPU experts, chunk, threshold, kt-kernel threads), with memory that stays where it was.

Why a session (docs/path-runner.md#memory-across-configurations): kt-kernel 0.7.2 never frees a
closed MoE layer's weight copy (its AMX MoE base allocates each expert's weight buffers with
`aligned_alloc` and its destructor is the default one), so building and closing a stack per
configuration grew resident memory by one layer's weights per configuration (1.1 GiB for
qwen3-30b-a3b, 4.1 GiB for glm-4.5-air on the H200 box) until the box killed the process. A session
builds one kt-kernel MoE per thread count it will serve, all up front, and reuses them: the GPU /
CPU split is kt-kernel's GPU mask plus the resident experts on the device, the chunk and threshold
are arguments of a run, the thread count picks one of the MoEs. Device buffers are sized for the
largest chunk of the session, kt-kernel's `max_len` for its largest hybrid forward.

Warm-up (the measurement protocol's, kttune.protocol): the first time a (GPU experts, threads,
forward plan) runs in the session it runs once untimed (kernels and their compilation for those
shapes, the allocator's blocks, attention at each prefix length, the pool); a run that follows one
of another GPU-expert count or thread count runs one short forward on each path it uses first (the
resident experts were rebuilt, the layerwise slot is re-allocated at its first forward, the other
pool was parked).

`kttune.runner.worker` runs a session in a child process.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Callable

from kttune.errors import UserError
from kttune.memory.vram import EXPAND_EVERY_PREFIX
from kttune.runner.result import PathRun
from kttune.spec.methods import METHODS

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SessionSpec:
    model: str  # catalog name or model directory
    method: str | None = None
    layers: int = 2  # K
    threads: tuple[int, ...] = ()  # kt-kernel worker counts served (all built up front); () = cores - 3
    max_tokens: int = 4096  # the largest forward (chunk): device-side buffers
    cpu_max_tokens: int = 4096  # the largest hybrid forward: kt-kernel's max_len (its host scratch grows with it)
    device: str = ""  # "" = cuda when present
    small: bool = False  # the model's architecture at small shapes (the CPU variant)
    small_dims: tuple[int, int, int] = (256, 128, 16)  # hidden, expert width, experts of those shapes
    seed: int = 0
    max_run_s: float = 60.0  # runs the cost model predicts (x slack) longer than this are not measured
    slack: float = 1.5
    profile: str | None = None  # for those predictions (default: the shipped default profile)
    # the layerwise pipeline's configuration (a PipelineConfig label, or "" for the runner's own
    # default: sglang-kt 0.7.2's loop, SGLANG_KT_PIPELINE); see docs/path-runner.md#pipeline
    pipeline: str = ""


@dataclass(frozen=True)
class RunnerConfig:
    gpu_experts: int  # --kt-num-gpu-experts
    chunk: int  # --chunked-prefill-size
    threshold: int  # --kt-gpu-prefill-token-threshold
    threads: int  # --kt-cpuinfer

    def label(self) -> str:
        return f"{self.chunk}/{self.threshold}/{self.gpu_experts}/{self.threads}"


def process_memory() -> dict:
    """This process's resident memory and, where CUDA is up, the device's: torch's allocated and
    reserved bytes and the device's used bytes (every process, the CUDA context included)."""
    import psutil

    out = {"rss_bytes": psutil.Process().memory_info().rss}
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            free, total = torch.cuda.mem_get_info()
            out.update(
                cuda_allocated_bytes=torch.cuda.memory_allocated(),
                cuda_reserved_bytes=torch.cuda.memory_reserved(),
                device_used_bytes=total - free,
            )
    except Exception:  # noqa: BLE001 - memory figures are a report, never a failure
        pass
    return out


# The methods whose GPU experts kttune's kernels run (bf16, fp8, int4 and MXFP4's e2m1 through the
# same w4a16 kernel; the AMX methods' GPU experts are the checkpoint's). MXFP8 runs on the CPU (the
# probe times it) but not here: its GPU experts would need an e4m3 GEMM with a scale per 32 weights,
# which kttune's kernels do not have (docs/path-runner.md#mxfp4).
RUNNER_METHODS = ("BF16", "FP8", "FP8_PERCHANNEL", "RAWINT4", "AMXINT4", "AMXINT8", "MXFP4")


def runner_refusal(model, method: str) -> str | None:
    """Why the path runner cannot run `model` with `method`, or None: its attention and its layerwise
    experts are kttune's own kernels, which cover GQA and MLA and the methods whose layout stage A
    writes (docs/path-runner.md); DeepSeek-V4's compressed attention and MXFP8 run SGLang's own
    kernels."""
    if model.compressed_attention is not None:
        return (
            f"the path runner cannot run {model.name}: its compressed sparse attention runs SGLang's FlashMLA "
            "kernels and indexer, which kttune does not have"
        )
    if method not in RUNNER_METHODS:
        return (
            f"the path runner cannot run {method}: its GPU experts and layerwise path are sglang-kt's own "
            f"kernels and manager, which kttune does not have (the runner runs {', '.join(RUNNER_METHODS)})"
        )
    return None


class RunnerSession:
    def __init__(self, spec: SessionSpec, progress: Progress | None = None) -> None:
        import torch

        from kttune.hw.registry import resolve_profile
        from kttune.runner.api import _components
        from kttune.runner.path_runner import PathRunner
        from kttune.runner.stack import StackOptions, build_stack, default_cpuinfer, small_spec
        from kttune.spec.loader import load_model
        from kttune.spec.methods import get_method

        say = progress or (lambda s: None)
        self.spec = spec
        self.model = load_model(spec.model, spec.method)
        self.method = get_method(spec.method or self.model.default_method).name
        refused = runner_refusal(self.model, self.method)
        if refused:
            raise UserError(
                refused,
                "predict its paths with `kttune search` or `kttune explain` (docs/deepseek-v4.md)"
                if self.model.compressed_attention is not None
                else "time another method's paths at the model's shapes with --method BF16, or predict them with "
                "`kttune search` or `kttune explain` (docs/path-runner.md)",
            )
        self.layerwise = get_method(self.method).layerwise
        h, i, e = spec.small_dims
        self.run_spec = small_spec(self.model, hidden=h, inter=i, experts=e) if spec.small else self.model
        threads = tuple(dict.fromkeys(spec.threads)) or (default_cpuinfer(),)
        self.threads = threads
        self._torch_threads = torch.get_num_threads()
        if not torch.cuda.is_available() or spec.device == "cpu":
            # the CPU variant: torch's intra-op threads and kt-kernel's spinning workers share the cores
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
            torch.set_num_threads(max(1, cores - max(1, max(threads))))
        t0 = time.perf_counter()
        say(
            f"building {spec.layers} layers of {self.model.name} {self.method} (kt-kernel threads {', '.join(map(str, threads))})"
        )
        router = self.model.router
        max_tokens = max(64, spec.max_tokens)
        self.stack = build_stack(
            self.run_spec,
            router,
            self.method,
            StackOptions(
                layers=spec.layers,
                gpu_experts=0,
                cpuinfer=threads[0],
                max_tokens=max_tokens,
                cpu_max_tokens=min(spec.cpu_max_tokens, max_tokens),
                seed=spec.seed,
                device=spec.device,
            ),
        )
        for t in threads[1:]:  # every kt-kernel MoE up front: nothing is built (and never freed) later
            self.stack.set_threads(t)
        self.stack.set_threads(threads[0])
        self.build_s = time.perf_counter() - t0
        from kttune.runner.pipeline import PipelineConfig

        self.runner = PathRunner(self.stack, PipelineConfig.from_label(spec.pipeline) if spec.pipeline else None)
        if spec.small:
            self.profile = None
        else:
            from kttune.probes.inventory import collect_inventory

            self.profile = resolve_profile(spec.profile, None if spec.profile else collect_inventory())
        self.comps = _components(self.profile, self.model, self.method) if self.profile is not None else None
        self._plans: set = set()  # (gpu experts, threads, forward plan) run at least once
        self._last: RunnerConfig | None = None
        self.stats = {
            "warm_runs": 0,
            "switch_warmups": 0,
            "warm_s": 0.0,
            "timed_runs": 0,
            "timed_s": 0.0,
            "build_s": round(self.build_s, 2),
        }
        self._initial_warmup()

    # ---- configuration -----------------------------------------------------------------------------
    @property
    def max_tokens(self) -> int:
        return self.stack.opts.max_tokens

    @property
    def cpu_max_tokens(self) -> int:
        st = self.stack
        return st.cpu.max_tokens if st.cpu is not None else st.opts.max_tokens

    def configure(self, cfg: RunnerConfig) -> None:
        if not 0 <= cfg.gpu_experts <= self.run_spec.num_experts:
            raise ValueError(f"gpu experts {cfg.gpu_experts} outside 0..{self.run_spec.num_experts}")
        if cfg.threads != self.stack.opts.cpuinfer:
            self.stack.set_threads(cfg.threads)
        if cfg.gpu_experts != self.stack.opts.gpu_experts:
            self.stack.set_gpu_experts(cfg.gpu_experts)

    def plan(self, cfg: RunnerConfig, prompt: int, force: str | None = None) -> tuple:
        """The forwards a prompt runs under `cfg`: (path, tokens, prefix) each."""
        from kttune.spec.forwards import forward_plan

        return forward_plan(self.layerwise, prompt, cfg.chunk, cfg.threshold, force)

    def skip_reason(self, cfg: RunnerConfig, prompt: int, force: str | None = None) -> str | None:
        """Why `cfg` cannot be measured at `prompt` tokens here, or None: a forward larger than the
        device buffers, a hybrid forward larger than kt-kernel's max_len, or a run the cost model
        predicts (x slack) to take longer than `max_run_s`."""
        from kttune.config import LaunchConfig
        from kttune.cost.prefill import hybrid_moe_layer, layerwise_moe_layer

        if force == "layerwise" and not self.layerwise:
            return f"{self.method} has no layerwise path"
        plan = self.plan(cfg, prompt, force)
        if cfg.chunk > self.max_tokens and any(m > self.max_tokens for _, m, _ in plan):
            return f"chunk {cfg.chunk} > the session's buffers ({self.max_tokens} tokens)"
        if cfg.threads not in self.stack.kt_by_threads:
            return f"{cfg.threads} kt-kernel threads: not built in this session ({', '.join(map(str, self.threads))})"
        for path, m, _ in plan:
            if path == "hybrid" and m > self.cpu_max_tokens and cfg.gpu_experts < self.run_spec.num_experts:
                return f"hybrid forward of {m} tokens > kt-kernel max_len {self.cpu_max_tokens} (its host scratch grows with it)"
        if self.comps is None:
            return None
        lc = LaunchConfig(self.method, 1, cfg.gpu_experts, cfg.chunk, cfg.threshold, max(65536, prompt), cfg.threads)
        est = 0.0
        for path, m, prefix in plan:
            lt = layerwise_moe_layer(self.comps, lc, m) if path == "layerwise" else hybrid_moe_layer(self.comps, lc, m)
            est += self.spec.layers * (lt.total_ms + self.comps.layer_other_ms(m, prefix, EXPAND_EVERY_PREFIX))
        if est * self.spec.slack / 1e3 > self.spec.max_run_s:
            return f"predicted {est / 1e3:.1f} s x {self.spec.slack} > {self.spec.max_run_s:g} s cap per run"
        return None

    # ---- warm-up -----------------------------------------------------------------------------------
    def _initial_warmup(self) -> None:
        """Kernels, pools and the allocator on each path, and attention over a cached prefix (CUDA
        loads that kernel on first use: 4.7-6.5 s of a first run on the H200 box)."""
        t0 = time.perf_counter()
        w = min(64, self.max_tokens)
        for t in self.threads:
            self.stack.set_threads(t)
            self.runner.run_prompt(w, w, 0, "hybrid")
        self.runner.run_prompt(2 * w, w, 0, "hybrid")
        if self.layerwise:
            self.runner.run_prompt(w, w, w, "layerwise")
        self.stack.set_threads(self.threads[0])
        self.stats["warm_s"] += time.perf_counter() - t0

    def warm(self, cfg: RunnerConfig, prompt: int, force: str | None = None) -> bool:
        """Warm what `cfg` at `prompt` touches before it is timed; True when something ran."""
        t0 = time.perf_counter()
        self.configure(cfg)
        key = (cfg.gpu_experts, cfg.threads, self.plan(cfg, prompt, force))
        ran = False
        if key not in self._plans:
            self.runner.run_prompt(prompt, cfg.chunk, cfg.threshold, force)
            self._plans.add(key)
            self.stats["warm_runs"] += 1
            ran = True
        elif self._last is None or (self._last.gpu_experts, self._last.threads) != (cfg.gpu_experts, cfg.threads):
            # another split or pool ran last: resident experts rebuilt, the slot re-allocated, this pool parked
            w = min(64, self.max_tokens)
            paths = {p for p, _, _ in key[2]}
            if "hybrid" in paths:
                self.runner.run_prompt(w, w, 0, "hybrid")
            if "layerwise" in paths:
                self.runner.run_prompt(w, w, w, "layerwise")
            self.stats["switch_warmups"] += 1
            ran = True
        self._last = cfg
        self.stats["warm_s"] += time.perf_counter() - t0
        return ran

    # ---- measuring ---------------------------------------------------------------------------------
    def sample(self, cfg: RunnerConfig, prompt: int, force: str | None = None, seed: int = 0) -> PathRun:
        """One timed run of `prompt` tokens under `cfg`, warmed first where needed (`warm`). Raises
        ValueError when it cannot run (see `skip_reason`)."""
        why = self.skip_reason(cfg, prompt, force)
        if why:
            raise ValueError(why)
        self.warm(cfg, prompt, force)
        t0 = time.perf_counter()
        run = self.runner.run_prompt(prompt, cfg.chunk, cfg.threshold, force, seed=seed)
        self.stats["timed_runs"] += 1
        self.stats["timed_s"] += time.perf_counter() - t0
        if self.spec.small:
            run = replace(run, model=self.model.name + " (small shapes)")
        return run

    def memory(self, at_rest: bool = True) -> dict:
        """The process's memory (`process_memory`); `at_rest` first puts the session at rest: no GPU
        experts resident and no layerwise slot (what every configuration builds on its own), so that
        what is left is what the session holds across configurations."""
        if at_rest:
            self.rest()
        return process_memory()

    def rest(self) -> None:
        """Release what the last configuration built for itself (its resident experts, the layerwise
        slot) and return the allocator's cached device blocks."""
        import gc

        import torch

        if self.stack.opts.gpu_experts or self.stack.pipeline is not None:
            self.stack.set_gpu_experts(0)
        self._last = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        _malloc_trim()

    def paths_agree(
        self, cfg: RunnerConfig, tokens: int | None = None, tolerance: float | None = None, seed: int = 7
    ) -> dict:
        """Whether hybrid and layerwise give the same output for `cfg`'s GPU experts and threads, at a
        forward of `threshold` tokens (where layerwise starts to fire) or `tokens`: the routed experts
        of layer 0 on both paths for the same hidden states, and the K layers' output of one forward
        through the switch against the same forward forced hybrid. Relative mean absolute difference
        against `tolerance` (default: `agreement_tolerance`, the two paths' precision: a wrong expert
        layout in the layerwise slot, as users report above the threshold, differs by 100% and more)."""
        import torch

        if tolerance is None:
            tolerance, why = agreement_tolerance(self.method, self.stack.device.type)
        else:
            why = "given"

        if not self.layerwise or cfg.threshold <= 0:
            return {
                "checked": False,
                "agree": True,
                "reason": "layerwise never fires" + ("" if self.layerwise else f" ({self.method} has none)"),
            }
        m = min(tokens or cfg.threshold, self.max_tokens, self.cpu_max_tokens)
        self.configure(cfg)
        g = torch.Generator(device=self.stack.device).manual_seed(seed)
        h = torch.randn(m, self.run_spec.hidden_size, generator=g, device=self.stack.device, dtype=torch.bfloat16).mul_(
            0.5
        )
        yh, _, _ = self.runner.moe_output(h, "hybrid")
        yl, _, _ = self.runner.moe_output(h, "layerwise")
        self.runner.run_prompt(m, m, m, None, seed=seed)
        out_switch = self.runner.last_hidden.clone()
        self.runner.run_prompt(m, m, m, "hybrid", seed=seed)
        out_hybrid = self.runner.last_hidden.clone()
        self._last = None  # the next timed run follows these forwards: warm it as after a switch

        def rel(a, b) -> float:
            return float((a.double() - b.double()).abs().mean() / b.double().abs().mean().clamp_min(1e-30))

        finite = bool(torch.isfinite(yl).all() and torch.isfinite(out_switch).all())
        moe, layer = rel(yl, yh), rel(out_switch, out_hybrid)
        return {
            "checked": True,
            "tokens": m,
            "threshold": cfg.threshold,
            "gpu_experts": cfg.gpu_experts,
            "threads": cfg.threads,
            "moe_rel_diff": moe,
            "layers_rel_diff": layer,
            "tolerance": tolerance,
            "tolerance_why": why,
            "finite": finite,
            "agree": finite and moe <= tolerance and layer <= tolerance,
            "backends": dict(self.runner.backends),
            "note": "" if m == cfg.threshold else f"checked at {m} tokens (the session's largest hybrid forward)",
        }

    def info(self) -> dict:
        return {
            "model": self.model.name,
            "method": self.method,
            "layers": self.spec.layers,
            "threads": list(self.threads),
            "max_tokens": self.max_tokens,
            "cpu_max_tokens": self.cpu_max_tokens,
            "small": self.spec.small,
            "device": str(self.stack.device),
            "num_experts": self.run_spec.num_experts,
            "layerwise": self.layerwise,
            "notes": list(self.stack.notes),
            "stats": {k: round(v, 2) if isinstance(v, float) else v for k, v in self.stats.items()},
        }

    def close(self) -> None:
        import torch

        self.stack.close()
        del self.runner
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        torch.set_num_threads(self._torch_threads)


BF16_ORDER_TOLERANCE = 0.03  # bf16 sums of the same products in another order: well under 1% apart
E4M3_HALF_STEP = 2.0**-4  # e4m3 keeps 3 mantissa bits: rounding moves a value by up to 1/16 of itself


def agreement_tolerance(method: str, device: str) -> tuple[float, str]:
    """How far apart the hybrid and layerwise outputs of one forward may be when both are right.

    Both paths hold the same weights; they differ in arithmetic. bf16 and int4 weight-only (w4a16)
    kernels differ only in summation order (BF16_ORDER_TOLERANCE). The FP8 methods' GPU kernel on CUDA
    quantises the activations to e4m3 per token (kttune.kernels.grouped_moe, as sglang's w8a8 FP8
    kernels do) while kt-kernel's CPU path does not, so the two also differ by e4m3's rounding, up to
    half a step of 3 mantissa bits per element; and with 128x128 block scales the runner's CUDA kernel
    takes one scale per output row (kttune.kernels.gpu_experts), approximate values of the same size.
    Either stays an order of magnitude below a wrong expert layout (100% and more)."""
    fmt = METHODS[method].cpu_format if method in METHODS else ""
    if fmt.startswith("fp8") and device == "cuda":
        return BF16_ORDER_TOLERANCE + E4M3_HALF_STEP, "fp8 on CUDA: e4m3 activations on the GPU path, bf16 on the CPU"
    return BF16_ORDER_TOLERANCE, "same precision on both paths: bf16 summation order"


def _malloc_trim() -> None:
    """Give glibc's freed heap pages back (so resident memory shows what is held, not what the
    allocator keeps cached); nothing where glibc is not the allocator."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
