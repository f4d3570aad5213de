"""ADAPTER between the path runner (kttune.runner) and the measured search's `Evaluator`
protocol (kttune.search.measured). It lives outside the search core, which never imports probes.

The evaluator holds ONE runner session (kttune.runner.session) for the whole search: the
model's K decoder layers and one kt-kernel MoE per thread count of the search space are built once,
in a worker process (kttune.runner.worker), and every configuration is measured on them. So
memory stays where it was from one configuration to the next (kt-kernel 0.7.2 never frees a closed
layer), and a configuration costs its prompts, not a rebuild. Each `measure` call is one fresh
timed sample per length, warmed first where the session has not run those shapes; the
extrapolated whole-model time (`PathRun.extrapolated_ms`) is the answer. A length the runner cannot
measure (larger than its buffers or kt-kernel's max_len, over its time cap) is left out, with the
reason kept in `skipped`.

Until kttune.runner is importable, asking for the runner is a one-line error naming the
fallback (`--evaluator model`)."""

from __future__ import annotations

import importlib
import os
from typing import Sequence

from kttune.config import LaunchConfig
from kttune.errors import UserError

RUNNER_MODULE = "kttune.runner.session"
# kt-kernel's hybrid scratch (max_len) may take at most this share of the host's RAM in a session
HYBRID_SCRATCH_RAM_SHARE = 0.25


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)


def cpu_variant_threads(threads: Sequence[int]) -> dict[int, int]:
    """The CPU variant runs on whatever machine CI has: each searched `--kt-cpuinfer` value is
    measured with at most cores - 1 kt-kernel workers (1 on a 2-core machine)."""
    cap = max(1, _cores() - 1)
    return {t: min(t, cap) for t in threads}


def hybrid_max_tokens(model, cfg: LaunchConfig, chunks: Sequence[int], ram_bytes: int) -> int:
    """The largest chunk whose kt-kernel forward scratch (its max_len) fits in
    HYBRID_SCRATCH_RAM_SHARE of `ram_bytes` (kttune.memory.host.cpu_scratch_bytes); the smallest
    chunk at least."""
    from dataclasses import replace

    from kttune.memory.host import cpu_scratch_bytes

    fit = [
        c
        for c in sorted(chunks)
        if cpu_scratch_bytes(model, replace(cfg, chunked_prefill_size=c)) <= HYBRID_SCRATCH_RAM_SHARE * ram_bytes
    ]
    return fit[-1] if fit else min(chunks)


def session_spec_for(
    inp,
    device: str,
    threads: Sequence[int],
    chunks: Sequence[int],
    lengths: Sequence[int],
    layers: int = 2,
    max_run_s: float = 120.0,
    ram_bytes: int | None = None,
    seed: int = 0,
):
    """The runner session a search over `chunks` x `threads` at the workload's `lengths` needs."""
    import psutil

    from kttune.runner.session import SessionSpec

    r = inp.request
    small = device == "cpu"
    m = r.model
    longest = max(lengths)
    max_tokens = min(max(chunks), longest)
    probe_cfg = LaunchConfig(r.method, r.tp, 0, max_tokens, 0, max(65536, longest), max(threads))
    spec_model = m
    if small:
        from kttune.runner.stack import small_spec

        spec_model = small_spec(m)
    ram = ram_bytes or psutil.virtual_memory().total
    # a forward is never longer than the longest prompt: chunks beyond it cap there
    cpu_cap = hybrid_max_tokens(spec_model, probe_cfg, sorted({min(c, max_tokens) for c in chunks}), ram)
    model_arg = m.source if os.path.isdir(m.source) else m.name
    return SessionSpec(
        model=model_arg,
        method=r.method,
        layers=layers,
        threads=tuple(sorted(set(threads))),
        max_tokens=max_tokens,
        cpu_max_tokens=cpu_cap,
        device=device,
        small=small,
        seed=seed,
        max_run_s=max_run_s,
    )


class PathRunnerEvaluator:
    """The measured search's evaluator on a runner session (in a worker process by default)."""

    def __init__(self, session_spec, name: str, thread_map: dict[int, int] | None = None, isolate: bool = True) -> None:
        self.spec, self.name = session_spec, name
        self.thread_map = dict(thread_map or {})
        self.isolate = isolate
        self._session = None
        self.skipped: dict[LaunchConfig, list[dict]] = {}
        self.samples = 0

    @property
    def started(self) -> bool:
        return self._session is not None

    @property
    def session(self):
        if self._session is None:
            if self.isolate:
                from kttune.runner.worker import SessionWorker

                self._session = SessionWorker(self.spec)
            else:
                from kttune.runner.session import RunnerSession

                self._session = RunnerSession(self.spec)
        return self._session

    def runner_config(self, cfg: LaunchConfig):
        from kttune.runner.session import RunnerConfig

        t = self.thread_map.get(cfg.cpuinfer_threads, cfg.cpuinfer_threads)
        return RunnerConfig(cfg.num_gpu_experts, cfg.chunked_prefill_size, cfg.gpu_prefill_token_threshold, t)

    def skip_reason(self, cfg: LaunchConfig, length: int) -> str | None:
        return self.session.skip_reason(self.runner_config(cfg), length)

    def sample_run(self, cfg: LaunchConfig, length: int, force: str | None = None, seed: int = 0):
        """One timed `PathRun` of `length` tokens under `cfg`, its prompt drawn with `seed`, or None (the
        reason in `skipped`)."""
        rc = self.runner_config(cfg)
        why = self.session.skip_reason(rc, length, force)
        if why is None:
            try:
                self.samples += 1
                return self.session.sample(rc, length, force, seed=seed)
            except ValueError as e:  # out of memory or too large, found while running
                why = str(e)[:200]
        self.skipped.setdefault(cfg, []).append({"prompt": length, "reason": why, "force": force})
        return None

    def measure(self, cfg: LaunchConfig, lengths: Sequence[int]) -> dict[int, float]:
        out = {}
        for n in lengths:
            run = self.sample_run(cfg, n)
            if run is not None:
                out[n] = float(run.extrapolated_ms)
        return out

    def paths_agree(self, cfg: LaunchConfig, tokens: int | None = None) -> dict:
        return self.session.paths_agree(self.runner_config(cfg), tokens)

    def memory(self) -> dict:
        out = dict(self.session.memory())
        if self.isolate:
            from kttune.runner.worker import worker_memory

            out.update(worker_memory(self._session))
        return out

    def info(self) -> dict:
        return self.session.info()

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None


def _runner_available(device: str = "cuda") -> None:
    from kttune.extras import require

    require("torch", f"--evaluator {'runner-cpu' if device == 'cpu' else 'runner'} (the path runner)")
    try:
        importlib.import_module(RUNNER_MODULE)
    except ModuleNotFoundError as e:
        if e.name and RUNNER_MODULE.startswith(e.name):
            raise UserError(
                "the path runner is not available in this kttune (no kttune.runner)",
                "use --evaluator model for a dry run of the measured search, or update kttune",
            ) from None
        raise


def path_runner_evaluator(
    inp,
    device: str = "cuda",
    threads: Sequence[int] | None = None,
    chunks: Sequence[int] | None = None,
    layers: int = 2,
    isolate: bool = True,
    max_run_s: float = 120.0,
    lengths: Sequence[int] | None = None,
) -> PathRunnerEvaluator:
    """The runner evaluator for a request: its session sized for the search space's chunks and
    thread counts (or those given) at the workload's prompt lengths. `device` "cpu" is the CPU
    variant (small shapes; thread counts capped by `cpu_variant_threads`). `lengths`: the prompt
    lengths it will measure (default: the workload's)."""
    _runner_available(device)
    from kttune.search.study import prepare_search

    if threads is None or chunks is None:
        _, space = prepare_search(inp.request)
        threads = tuple(threads or space.threads)
        chunks = tuple(chunks or space.chunks)
    tmap = cpu_variant_threads(threads) if device == "cpu" else {}
    built = sorted(set(tmap.values())) if tmap else sorted(set(threads))
    spec = session_spec_for(
        inp, device, built, chunks, lengths or inp.request.workload.prompt_tokens, layers=layers, max_run_s=max_run_s
    )
    return PathRunnerEvaluator(spec, f"runner-{device}", tmap, isolate=isolate)
