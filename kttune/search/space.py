"""The search space: which flags are searched, over which values, and the structural rules of
docs/sglang-kt.md that shape it (threshold fixed at 0 for methods without layerwise; the rest are
constraints). Fixed for a study: everything here derives from the study's inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from kttune.bounds import FORWARD_TOKENS
from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import crossover_tokens
from kttune.errors import ParameterError, UserError
from kttune.memory.host import host_ram_breakdown
from kttune.memory.vram import gpu_expert_bytes, max_kv_tokens_that_fit, vram_breakdown
from kttune.search.admission import pool_tokens_for, request_kv_tokens
from kttune.search.evaluate import Budget
from kttune.search.workload import Workload
from kttune.units import GIB

# SGLang accepts any multiple of the page size; deployment guides run 65536.
CHUNK_CHOICES = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
# User chunks must be multiples of this: SGLang needs a multiple of --page-size (1 by default, 64
# for FlashMLA), and kt-kernel's AMX classes pad activation rows to M_STEP = 32.
CHUNK_PAGE = 64
# Fixed threshold candidates: from 64 up, since the paths of the large FP8/INT4 models (DeepSeek-V3,
# Kimi-K2, MiniMax-M2) cross at 64-512 tokens per forward on a PCIe Gen5 box; KT's own docs use 400
# and 500. `threshold_choices` adds the predicted crossovers of the space to these.
THRESHOLD_CHOICES = (
    0,
    64,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1536,
    2048,
    3072,
    4096,
    6144,
    8192,
    12288,
    16384,
    24576,
    32768,
)
KV_UNIT = 1024  # --max-total-tokens is searched in units of 1024 tokens
MIN_USEFUL_KV_TOKENS = 4096


@dataclass(frozen=True)
class SearchSpace:
    chunks: tuple[int, ...]
    thresholds: tuple[int, ...]  # (0,) when the method has no layerwise path
    gpu_experts_max: int
    kv_units_min: int
    kv_units_max: int
    threads: tuple[int, ...]
    threadpools: int
    max_running_requests: int  # the workload's concurrency; a config's flag is what its pool holds of it
    tp: int
    method: str
    request_kv_tokens: int = 0  # one request at the workload's mean length (kttune.search.admission)
    # per thread count, the measured fastest (--kt-threadpool-count, --kt-numa-nodes); absent: threadpools
    pools_by_threads: tuple[tuple[int, int, tuple[int, ...]], ...] = ()
    # --attention-backend choices ("" = kttune's launch default; `attention_backends`)
    backends: tuple[str, ...] = ("",)

    def pools(self, threads: int) -> tuple[int, tuple[int, ...]]:
        return next(((p, n) for t, p, n in self.pools_by_threads if t == threads), (self.threadpools, ()))

    def config(
        self, chunk: int, threshold: int, gpu_experts: int, kv_units: int, threads: int, backend: str = ""
    ) -> LaunchConfig:
        """The launch config of these values; `--max-running-requests` (and the decode graphs) follow
        from the pool: the workload's concurrency, or the requests the pool holds when fewer."""
        running = self.max_running_requests
        if self.request_kv_tokens:
            running = max(1, min(running, kv_units * KV_UNIT // self.request_kv_tokens))
        pools, numa = self.pools(threads)
        return LaunchConfig(
            method=self.method,
            tp=self.tp,
            num_gpu_experts=gpu_experts,
            chunked_prefill_size=chunk,
            gpu_prefill_token_threshold=threshold,
            max_total_tokens=kv_units * KV_UNIT,
            cpuinfer_threads=threads,
            threadpool_count=pools,
            numa_nodes=numa,
            max_running_requests=running,
            cuda_graph_max_bs=running,
            attention_backend=backend,
        )

    def suggest(self, trial) -> LaunchConfig:
        chunk = trial.suggest_categorical("chunk", list(self.chunks))
        threshold = trial.suggest_categorical("threshold", list(self.thresholds)) if len(self.thresholds) > 1 else 0
        n = trial.suggest_int("gpu_experts", 0, self.gpu_experts_max)
        kv = trial.suggest_int("kv_k", self.kv_units_min, self.kv_units_max, log=True)
        threads = trial.suggest_categorical("threads", list(self.threads)) if len(self.threads) > 1 else self.threads[0]
        backend = (
            trial.suggest_categorical("attention", list(self.backends)) if len(self.backends) > 1 else self.backends[0]
        )
        return self.config(chunk, threshold, n, kv, threads, backend)

    def config_of(self, params: dict) -> LaunchConfig:
        """The config of a trial's params (`suggest`'s names; a dimension with one value is absent)."""
        return self.config(
            params["chunk"],
            params.get("threshold", 0),
            params["gpu_experts"],
            params["kv_k"],
            params.get("threads", self.threads[0]),
            params.get("attention", self.backends[0]),
        )

    def params_of(self, cfg: LaunchConfig) -> dict:
        p = {
            "chunk": cfg.chunked_prefill_size,
            "gpu_experts": cfg.num_gpu_experts,
            "kv_k": max(self.kv_units_min, min(self.kv_units_max, cfg.max_total_tokens // KV_UNIT)),
        }
        if len(self.thresholds) > 1:
            p["threshold"] = cfg.gpu_prefill_token_threshold
        if len(self.threads) > 1:
            p["threads"] = cfg.cpuinfer_threads
        if len(self.backends) > 1:
            p["attention"] = cfg.attention_backend if cfg.attention_backend in self.backends else self.backends[0]
        return p

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def check_chunks(chunks: Iterable[int], page: int = CHUNK_PAGE) -> tuple[int, ...]:
    """The user's chunk sizes (`chunks`) sorted and deduplicated: positive multiples of `page`;
    ParameterError otherwise (kttune.app.resolve.chunks reads them from text such as 8192,64k)."""
    out = set()
    for n in chunks:
        if n > FORWARD_TOKENS.hi:
            FORWARD_TOKENS.check(n, "chunks")
        if n <= 0 or n % page:
            raise ParameterError(
                "chunks",
                f"value {n} is not a positive multiple of {page}",
                f"use a multiple of {page}, e.g. {max(page, n // page * page) or page}",
            )
        out.add(n)
    if not out:
        raise ParameterError("chunks", "is empty", "pass e.g. {chunks} 8192,65536")
    return tuple(sorted(out))


def chunks_that_fit(
    comp: Components,
    budget: Budget,
    tp: int,
    threads: int,
    pools: int,
    kv_tokens: int,
    running: int,
    candidates: Sequence[int],
) -> tuple[tuple[int, ...], list[str]]:
    """The candidate chunks whose least launch (no GPU experts, `kv_tokens` of KV, layerwise off)
    fits the VRAM budget and whose kt-kernel CPU scratch (sized by max_len = the chunk; kt-kernel
    refuses a forward longer than it, docs/memory.md) fits host RAM; and why the others do not."""
    keep, why = [], []
    base = minimal_config(comp, tp, threads, pools, kv_tokens, running)
    for c in candidates:
        cfg = replace(base, chunked_prefill_size=c)
        peak = vram_breakdown(comp.model, cfg).runtime_peak_bytes
        host = host_ram_breakdown(comp.model, cfg).total_bytes
        if peak > budget.usable_vram_bytes:
            why.append(f"chunk {c}: VRAM peak {peak / GIB:.1f} GiB > {budget.usable_vram_bytes / GIB:.1f} GiB usable")
        elif host > budget.host_ram_bytes:
            why.append(
                f"chunk {c}: host RAM {host / GIB:.0f} GiB (kt-kernel scratch grows with the chunk) "
                f"> {budget.host_ram_bytes / GIB:.0f} GiB"
            )
        else:
            keep.append(c)
    return tuple(keep), why


def minimal_config(
    comp: Components, tp: int, threads: int, threadpools: int, kv_tokens: int, running: int
) -> LaunchConfig:
    """The least VRAM a KT launch can take: no GPU experts, the smallest chunk, layerwise off."""
    return LaunchConfig(
        method=comp.method.name,
        tp=tp,
        num_gpu_experts=0,
        chunked_prefill_size=CHUNK_CHOICES[0],
        gpu_prefill_token_threshold=0,
        max_total_tokens=kv_tokens,
        cpuinfer_threads=threads,
        threadpool_count=threadpools,
        max_running_requests=running,
        cuda_graph_max_bs=max(1, running),
    )


def build_space(
    comp: Components, workload: Workload, budget: Budget, tp: int, chunks: Sequence[int] | None = None
) -> SearchSpace:
    """Bounds from the model, the profile and the budget. `chunks`: the user's chunk choices (see
    `check_chunks`) instead of CHUNK_CHOICES; either set is cut to the model's context and to what
    fits VRAM and host RAM (`chunks_that_fit`). UserError when none of the user's chunks fits;
    otherwise raises nothing: callers check `kv_units_max >= kv_units_min`
    (see kttune.search.study.check_budget)."""
    model = comp.model
    ctx = model.max_position_embeddings
    threads = tuple(comp.cpu_thread_options())
    pools = max(1, len(comp.profile.inventory.cpu.numa_nodes))
    running = max(1, workload.concurrency)
    if chunks and not [c for c in chunks if c <= ctx]:
        raise UserError(
            f"every {{chunks}} value exceeds {model.name}'s context of {ctx} tokens",
            f"pass chunks of at most {ctx} tokens",
            params=("chunks",),
        )
    wanted = tuple(c for c in (chunks or CHUNK_CHOICES) if c <= max(CHUNK_CHOICES[0] if not chunks else 0, ctx))
    longest_kv = max(MIN_USEFUL_KV_TOKENS, workload.max_prompt_tokens + workload.output_tokens)
    fit, why = chunks_that_fit(comp, budget, tp, threads[0], pools, longest_kv, running, wanted)
    if chunks and not fit:
        raise UserError(
            f"none of {{chunks}} fits: {'; '.join(why)}",
            "pass smaller chunks, or raise {vram_bytes} / {host_ram_bytes}",
            params=("chunks", "vram_bytes", "host_ram_bytes"),
        )
    chunks = fit or wanted[:1]  # nothing fits: keep the smallest, check_budget says why
    smallest = minimal_config(comp, tp, threads[0], pools, 0, running)
    kv_max_tokens = max_kv_tokens_that_fit(model, smallest, budget.usable_vram_bytes, page=KV_UNIT)
    longest = workload.max_prompt_tokens + workload.output_tokens
    kv_min = max(MIN_USEFUL_KV_TOKENS, longest)
    # The pool must also run the workload's concurrency at its mean length at once (SGLang admits no
    # more, kttune.search.admission), where the budget allows it; else the most it can (the report
    # says how many requests that holds).
    kv_min = max(kv_min, min(pool_tokens_for(workload), kv_max_tokens // KV_UNIT * KV_UNIT))
    # the KV pool need not exceed every request at its full length at once
    kv_cap = max(running * longest, 2 * kv_min)
    kv_units_min = math.ceil(kv_min / KV_UNIT)
    kv_units_max = min(kv_max_tokens, kv_cap) // KV_UNIT
    # GPU experts: as many per layer as fit beside the smallest everything else and the least KV pool
    # the space offers. VRAM is linear in the expert count from one expert on (the first also brings
    # the hybrid MoE phase's GPU activations), so this is exact.
    least = replace(smallest, max_total_tokens=kv_units_min * KV_UNIT)
    one = replace(least, num_gpu_experts=1)
    per_layer = gpu_expert_bytes(model, comp.method, one)
    spare = budget.usable_vram_bytes - vram_breakdown(model, one).runtime_peak_bytes
    n_fit = 1 + int(spare // per_layer) if per_layer > 0 and spare >= 0 else 0
    gpu_experts_max = max(0, min(model.num_experts, n_fit))
    thresholds = threshold_choices(comp, replace(least, chunked_prefill_size=chunks[-1]), gpu_experts_max, threads)
    return SearchSpace(
        chunks=chunks,
        thresholds=thresholds,
        gpu_experts_max=gpu_experts_max,
        kv_units_min=kv_units_min,
        kv_units_max=max(kv_units_min, kv_units_max),
        threads=threads,
        threadpools=pools,
        max_running_requests=running,
        tp=tp,
        method=comp.method.name,
        request_kv_tokens=request_kv_tokens(workload),
        pools_by_threads=tuple((t, *comp.threadpool_choice(t)) for t in threads),
        backends=attention_backends(comp),
    )


def attention_backends(comp: Components) -> tuple[str, ...]:
    """The --attention-backend choices a search offers (docs/cost-model.md#mla-prefill-forms): for an
    MLA model, kttune's triton launch (the latent form over any prefix, no expansion) and flashinfer
    (one expanded shot over a prefix of 8,192 tokens or more: faster at long prompts, at up to 128K
    expanded rows of activations), as KT's Kimi-K2 and GLM-5 tutorials launch; for a sparse-attention
    model also nsa, its sparse attention, on the GPUs whose kernels SGLang runs it with (SM 90 and
    SM 100-109). One choice for other attention kinds."""
    m = comp.model
    if m.attention != "mla":
        return ("",)
    sm = comp.gpu_sm
    nsa = m.sparse_attention is not None and sm is not None and (sm == 90 or 100 <= sm < 110)
    return ("", "flashinfer") + (("nsa",) if nsa else ())


def threshold_choices(
    comp: Components, base: LaunchConfig, gpu_experts_max: int, threads: Sequence[int]
) -> tuple[int, ...]:
    """The thresholds a search offers: (0,) for methods without a layerwise path (sglang-kt crashes
    when it fires for them); else THRESHOLD_CHOICES plus the crossover the cost model predicts
    (kttune.cost.prefill.crossover_tokens, a multiple of 64) at each thread count with no and with
    the most GPU experts, at `base`'s chunk, all cut to that chunk (a forward never exceeds it)."""
    if not comp.method.layerwise:
        return (0,)
    chunk = base.chunked_prefill_size
    crossings = set()
    for n in sorted({0, gpu_experts_max}):
        for t in threads:
            cross = crossover_tokens(comp, replace(base, num_gpu_experts=n, cpuinfer_threads=t))
            if cross is not None:
                crossings.add(cross)
    return tuple(sorted(t for t in set(THRESHOLD_CHOICES) | crossings if t <= chunk))
