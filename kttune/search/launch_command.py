"""A user's sglang-kt launch command as the configuration kttune models: the flags it sets
(kttune.spec.launch_args), SGLang's own choice for each flag it leaves unset
(kttune.memory.sglang_defaults), the KV pool SGLang sizes at start, and a note for every value
kttune had to assume or fit to the profile. Pure.

Commands that cannot serve as KT launches are refused with the reason (InfeasibleError, exit 1):
no `--kt-weight-path` or no GPU-expert count (sglang-kt then silently runs without KT and puts
every expert on the GPU), a threshold with a method that has no layerwise path (it crashes at the
first long forward), a KV pool of nothing at start.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from kttune.config import LaunchConfig
from kttune.cost.components import SPARSE_BACKEND
from kttune.errors import InfeasibleError, UserError
from kttune.memory.sglang_defaults import (
    default_chunked_prefill_size,
    default_cuda_graph_max_bs,
    default_max_running_requests,
    default_mem_fraction_static,
    kv_tokens_the_room_holds,
    tokens_in_room,
    linear_state_slots_at_start,
    MAMBA_FULL_MEMORY_RATIO,
    profiled_kv_tokens,
)
from kttune.memory.vram import (
    LAUNCH_ATTENTION_BACKEND,
    LINEAR_STATE_SLOTS_PER_REQUEST,
    MLA_CHUNKED_PREFIX_THRESHOLD,
    SGLANG_DEFAULT_BACKEND,
    kv_cell_bytes,
    linear_state_bytes_per_request,
)
from kttune.search.admission import running_requests
from kttune.search.user_flags import NATIVE_METHODS, default_cpuinfer_threads, threshold_crashes, usable_threads
from kttune.search.workload import Workload
from kttune.spec import compressed_attention as compressed
from kttune.spec.launch_args import ParsedLaunch, check_attention_backend, flag_name
from kttune.spec.methods import get_method
from kttune.spec.model_spec import ModelSpec
from kttune.units import GIB, MIB

DEFAULT_METHOD = "AMXINT4"  # sglang-kt 0.7.2's `--kt-method` when unset
DEFAULT_THREADPOOLS = 2  # its `--kt-threadpool-count` when unset
DSA_PAGE_SIZE = 64  # SGLang's page size for DeepSeek Sparse Attention models, whatever --page-size says
KV_DTYPE_BYTES = {"auto": 2, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8_e5m2": 1, "fp8_e4m3": 1}


def method_of(parsed: ParsedLaunch) -> tuple[str, tuple[str, ...]]:
    """The command's KT method (validated) and a note when it is sglang-kt's default."""
    if parsed.given("method"):
        return get_method(str(parsed.get("method"))).name, ()
    return DEFAULT_METHOD, (
        f"{flag_name('method')} unset: sglang-kt 0.7.2 uses {DEFAULT_METHOD} (converted CPU weights)",
    )


@dataclass(frozen=True)
class ResolvedLaunch:
    cfg: LaunchConfig  # what the server runs with
    mem_fraction_static: float  # given or SGLang's
    profiled_kv_tokens: int  # the pool that fraction leaves at start, before --max-total-tokens caps it
    notes: tuple[str, ...]  # the defaults SGLang takes and the values kttune fitted, one line each


def resolve_launch(
    parsed: ParsedLaunch,
    model: ModelSpec,
    method: str,
    vram_bytes: int,
    workload: Workload,
    measured_threads: Sequence[int],
    cores: int,
    numa_nodes: int,
) -> ResolvedLaunch:
    """The LaunchConfig sglang-kt 0.7.2 runs for `parsed` on a GPU of `vram_bytes`, for the
    model (`method` from `method_of`); `measured_threads`: the profile's `--kt-cpuinfer` counts."""
    meth = get_method(method)
    notes: list[str] = []
    f = flag_name
    if not parsed.given("weight_path"):
        raise InfeasibleError(
            f"the command has no {f('weight_path')}: sglang-kt 0.7.2 then turns KT off and loads every "
            "expert on the GPU (ktransformers#2099)",
            f"add {f('weight_path')} DIR (for {meth.name}: "
            + ("the model directory itself)" if meth.native else "the converted CPU weights)"),
        )
    tp = int(parsed.get("tp", 1))
    if tp < 1:
        raise UserError(f"{f('tp')} {tp} must be at least 1", f"pass the GPU count, e.g. {f('tp')} 1")
    E, L = model.num_experts, model.num_moe_layers
    if parsed.given("num_gpu_experts"):
        n = int(parsed.get("num_gpu_experts"))
        if parsed.given("gpu_experts_ratio"):
            notes.append(f"{f('gpu_experts_ratio')} is ignored: {f('num_gpu_experts')} is set")
    elif parsed.given("gpu_experts_ratio"):
        ratio = float(parsed.get("gpu_experts_ratio"))
        if not 0.0 <= ratio <= 1.0:
            raise UserError(
                f"{f('gpu_experts_ratio')} {ratio:g} is outside 0..1", "pass a share of the experts, e.g. 0.1"
            )
        total = int(E * L * ratio)
        n = total // L
        notes.append(
            f"{f('gpu_experts_ratio')} {ratio:g}: {total} GPU experts over {L} MoE layers, modelled as {n} per layer"
            + (f" (uniform placement gives {total % L} layers one more)" if total % L else "")
        )
    else:
        raise InfeasibleError(
            f"the command sets neither {f('num_gpu_experts')} nor {f('gpu_experts_ratio')}: sglang-kt 0.7.2 "
            "then disables KT with only a warning",
            f"add {f('num_gpu_experts')} N (0 is valid)",
        )
    if not 0 <= n <= E:
        raise UserError(
            f"{f('num_gpu_experts')} {n} is outside 0..{E} (experts per MoE layer of {model.name})",
            f"pass 0..{E}: the flag counts experts per layer",
        )
    threshold = int(parsed.get("gpu_prefill_token_threshold", 0))
    if threshold < 0:
        raise UserError(f"{f('gpu_prefill_token_threshold')} {threshold} is negative", "pass 0 (off) or a token count")
    if threshold_crashes(meth, threshold):
        raise InfeasibleError(
            f"{f('gpu_prefill_token_threshold')} {threshold} with {meth.name}: sglang-kt 0.7.2 crashes at the "
            "first forward that reaches it (the method has no layerwise path, ktransformers#2113)",
            f"set {f('gpu_prefill_token_threshold')} 0, or use a native method ({NATIVE_METHODS})",
        )
    if parsed.given("chunked_prefill_size"):
        chunk = int(parsed.get("chunked_prefill_size"))
        if chunk <= 0:
            raise UserError(
                f"{f('chunked_prefill_size')} {chunk}: kttune models chunked prefill only (KT sizes its "
                "buffers by the chunk)",
                f"pass a chunk such as {f('chunked_prefill_size')} 8192",
            )
    else:
        chunk = default_chunked_prefill_size(vram_bytes)
        notes.append(f"{f('chunked_prefill_size')} unset: SGLang picks {chunk} for a {vram_bytes / GIB:.0f} GiB GPU")
    page = int(parsed.get("page_size", 1) or 1)
    if model.compressed_attention is not None and page != compressed.PAGE_SIZE:
        if parsed.given("page_size"):
            notes.append(f"{f('page_size')} {page}: SGLang sets {compressed.PAGE_SIZE} for {model.name}")
        page = compressed.PAGE_SIZE
    if model.sparse_attention and page != DSA_PAGE_SIZE:
        if parsed.given("page_size"):
            notes.append(
                f"{f('page_size')} {page}: SGLang sets {DSA_PAGE_SIZE} for a model with sparse attention ({model.name})"
            )
        page = DSA_PAGE_SIZE
    note = attention_backend_of(parsed, model)[1]
    if note:
        notes.append(note)
    if page < 1 or chunk % page:
        raise UserError(
            f"{f('chunked_prefill_size')} {chunk} is not a multiple of {f('page_size')} {page}",
            "SGLang needs the chunk to be whole pages",
        )
    graph_bs = int(parsed.get("cuda_graph_max_bs", 0)) or default_cuda_graph_max_bs(vram_bytes, tp)
    if not parsed.given("cuda_graph_max_bs"):
        notes.append(f"{f('cuda_graph_max_bs')} unset: SGLang captures decode graphs up to {graph_bs} requests")
    threads = sorted(measured_threads)
    usable = usable_threads(threads, cores)
    if parsed.given("cpuinfer_threads"):
        want = int(parsed.get("cpuinfer_threads"))
        th = want if want in threads else min(usable, key=lambda t: (abs(t - min(want, max(usable))), t))
        if th != want:
            notes.append(
                f"{f('cpuinfer_threads')} {want}: the profile measured {', '.join(map(str, threads))} threads "
                f"({cores} cores); modelled with {th}"
            )
        elif want >= cores:
            notes.append(
                f"{f('cpuinfer_threads')} {want} on {cores} cores: a pool on every core starves the thread that "
                "drives it (the measured cliff is in the prediction)"
            )
    else:
        th = default_cpuinfer_threads(threads, cores)
        notes.append(
            f"{f('cpuinfer_threads')} unset: sglang-kt 0.7.2 fails to start without it (read from code); "
            f"modelled with {th}, the most measured below {cores} cores"
        )
    pools = int(parsed.get("threadpool_count", 0)) or DEFAULT_THREADPOOLS
    if not parsed.given("threadpool_count"):
        notes.append(f"{f('threadpool_count')} unset: sglang-kt uses {DEFAULT_THREADPOOLS} pools")
    if pools != numa_nodes:
        notes.append(
            f"{f('threadpool_count')} {pools} on a machine with {numa_nodes} NUMA node(s): each pool is pinned "
            f"to one node; the profile's CPU curves are of {numa_nodes} pool(s)"
        )
    dtype = str(parsed.get("kv_cache_dtype", "auto")).lower()
    if model.compressed_attention is not None and dtype != "fp8_e4m3":
        if dtype != "auto":
            raise UserError(
                f"{f('kv_cache_dtype')} {dtype}: SGLang runs {model.name}'s cache in fp8_e4m3 only and stops at start",
                f"drop {f('kv_cache_dtype')} or pass fp8_e4m3",
            )
        dtype = "fp8_e4m3"
    if dtype not in KV_DTYPE_BYTES:
        raise UserError(f"{f('kv_cache_dtype')} {dtype} is not modelled", f"use one of {', '.join(KV_DTYPE_BYTES)}")
    base = LaunchConfig(
        method=meth.name,
        tp=tp,
        num_gpu_experts=n,
        chunked_prefill_size=chunk,
        gpu_prefill_token_threshold=threshold,
        max_total_tokens=0,
        cpuinfer_threads=th,
        threadpool_count=pools,
        max_running_requests=1,
        cuda_graph_max_bs=graph_bs,
        kv_cache_dtype_bytes=KV_DTYPE_BYTES[dtype],
        context_length=int(parsed.get("context_length", 0)),
        page_size=page,
    )
    if parsed.given("mem_fraction_static"):
        mfs = float(parsed.get("mem_fraction_static"))
        if not 0.0 < mfs < 1.0:
            raise UserError(f"{f('mem_fraction_static')} {mfs:g} is outside 0..1", "pass a share such as 0.9")
    else:
        mfs = default_mem_fraction_static(vram_bytes, chunk, graph_bs, tp)
        notes.append(f"{f('mem_fraction_static')} unset: SGLang takes {mfs:g} for a {vram_bytes / GIB:.0f} GiB GPU")
    base, linear_notes = _linear_state(parsed, model, base, vram_bytes, mfs)
    notes.extend(linear_notes)
    profiled = profiled_kv_tokens(model, base, vram_bytes, mfs)
    if profiled <= 0:
        raise InfeasibleError(
            f'SGLang stops at start with "Not enough memory": {f("mem_fraction_static")} {mfs:g} of the '
            f"{vram_bytes / GIB:.0f} GiB GPU leaves no room for a KV pool after the weights",
            f"lower {f('num_gpu_experts')}, or raise {f('mem_fraction_static')}",
        )
    if parsed.given("max_total_tokens"):
        cap = int(parsed.get("max_total_tokens"))
        if cap <= 0:
            raise UserError(f"{f('max_total_tokens')} {cap} must be positive", "pass a token count such as 65536")
        pool = min(cap, profiled)
        if cap > profiled:
            notes.append(
                f"{f('max_total_tokens')} {cap:,} is more than {f('mem_fraction_static')} {mfs:g} leaves: SGLang "
                f"starts with a {profiled:,}-token pool (and logs a warning)"
            )
    else:
        pool = profiled
        notes.append(
            f"{f('max_total_tokens')} unset: the pool fills what {f('mem_fraction_static')} {mfs:g} leaves, "
            f"{pool:,} tokens; freed VRAM (fewer GPU experts) then only grows it, never the runtime headroom"
        )
    if model.compressed_attention is not None:
        pool, holds = _compressed_pool(parsed, model, base, vram_bytes, mfs, profiled, notes)
    else:
        holds = kv_tokens_the_room_holds(model, base, vram_bytes, mfs)
    if pool > holds:
        over = (pool - holds) * kv_cell_bytes(model, tp, base.kv_cache_dtype_bytes)
        notes.append(
            f"sglang-kt 0.7.2 sizes the MLA KV pool by {model.head_dim} values a layer (qk_nope + qk_rope) where it "
            f"stores {model.kv_lora_rank + model.qk_rope_head_dim} (kv_lora_rank + qk_rope): its {pool:,}-token pool "
            f"takes {over / GIB:.2f} GiB more than {f('mem_fraction_static')} {mfs:g} leaves, a CUDA out-of-memory at "
            f"start or in the first long prefill; {f('max_total_tokens')} {holds:,} or less fits "
            "(docs/memory.md#what-sglang-picks-when-a-flag-is-unset)"
        )
    cfg = replace(base, max_total_tokens=pool)
    if parsed.given("max_running_requests"):
        running = int(parsed.get("max_running_requests"))
        if running < 1:
            raise UserError(f"{f('max_running_requests')} {running} must be at least 1", "pass e.g. 8")
    elif model.compressed_attention is not None:
        running = compressed.DEFAULT_MAX_RUNNING_REQUESTS
        notes.append(f"{f('max_running_requests')} unset: SGLang sets {running} for {model.name}")
    else:
        running = default_max_running_requests(model, cfg)
        notes.append(
            f"{f('max_running_requests')} unset: SGLang allows {running} (the pool runs "
            f"{running_requests(pool, workload)} of the workload's requests at once)"
        )
    slots = base.linear_state_slots
    if slots:
        per_slot = 1 if parsed.given("disable_radix_cache") else LINEAR_STATE_SLOTS_PER_REQUEST
        if slots // per_slot < 1:
            raise InfeasibleError(
                f"{slots} linear-attention state slot(s) run no request: SGLang runs at most "
                f"{flag_name('linear_state_slots')} // {per_slot} requests at once",
                f"pass {flag_name('linear_state_slots')} {per_slot} or more",
            )
        if running > slots // per_slot:
            notes.append(
                f"{flag_name('max_running_requests')} {running}: SGLang runs at most {slots // per_slot} at once "
                f"with {slots} linear-attention state slots ({per_slot} per request"
                f"{'' if per_slot == 1 else ' with the radix cache on'})"
            )
            running = slots // per_slot
    return ResolvedLaunch(replace(cfg, max_running_requests=running), mfs, profiled, tuple(notes))


def _compressed_pool(
    parsed: ParsedLaunch, model: ModelSpec, base: LaunchConfig, vram_bytes: int, mfs: float, first: int, notes: list
) -> tuple[int, int]:
    """DeepSeek-V4's pool as SGLang sizes it (docs/deepseek-v4.md#the-kv-pools): its calculator's tokens
    in the room the fraction leaves, at the SWA share the launch sets; with --max-total-tokens, at most
    that and at most the tokens of its first, generic sizing (`first`: `profiled_kv_tokens`)."""
    f = flag_name
    ca = model.compressed_attention
    cap = int(parsed.get("max_total_tokens")) if parsed.given("max_total_tokens") else None
    r = compressed.swa_ratio(cap, base.chunked_prefill_size)
    holds = tokens_in_room(model, base, vram_bytes, mfs, ca.bytes_per_full_token(r))
    if cap is None:
        return holds, holds
    pool = min(cap, first, holds)
    if r > compressed.SWA_RATIO:
        notes.append(
            f"{f('chunked_prefill_size')} {base.chunked_prefill_size:,} with {f('max_total_tokens')} {cap:,}: SGLang "
            f"raises the SWA share to {r:.2f} to hold two chunks, {ca.bytes_per_full_token(r):,.0f} bytes a token"
        )
    if pool < min(cap, holds):
        notes.append(
            f"{f('max_total_tokens')} {cap:,}: SGLang's first sizing counts {compressed.first_pass_cell_bytes(ca, model.num_layers):,} "
            f"bytes a token for {model.name} and caps the pool at {first:,} tokens; {f('mem_fraction_static')} "
            "must leave that much per token for the pool to reach the flag (kttune's launches do)"
        )
    return pool, max(pool, holds)


def attention_backend_of(parsed: ParsedLaunch, model: ModelSpec) -> tuple[str, str | None]:
    """The attention backend the cost model runs the command on (`Components.attention_backend`: as
    given, SGLang's pick where the cost model depends on it, else ""), and a note where it decides how a
    sparse-attention model attends (docs/cost-model.md#sparse-attention): SGLang picks its nsa
    backend for such a model when the flag is unset, and only that backend runs the indexer."""
    f = flag_name
    given = check_attention_backend(str(parsed.get("attention_backend"))) if parsed.given("attention_backend") else ""
    if model.compressed_attention is not None:
        compressed_backend = LAUNCH_ATTENTION_BACKEND["csa"]
        return "", (
            f"{f('attention_backend')} {given}: SGLang runs {model.name} with its {compressed_backend} backend "
            "whatever the flag says (docs/deepseek-v4.md)"
            if given and given != compressed_backend
            else None
        )
    if not model.sparse_attention:
        if model.attention != "mla":
            return given, (
                f"{f('attention_backend')} {given}: {model.name}'s attention is charged at the profile's measured "
                "rate whatever the backend"
                if given
                else None
            )
        if given:
            return given, None
        return SGLANG_DEFAULT_BACKEND, (
            f"{f('attention_backend')} unset: SGLang picks fa3 for {model.name}'s MLA on Hopper, flashinfer on "
            "SM 100, triton elsewhere; over a cached prefix fa3 and flashinfer attend in the latent form "
            f"below {MLA_CHUNKED_PREFIX_THRESHOLD:,} prefix tokens and expand it from there, triton always "
            "attends in it (docs/cost-model.md#mla-prefill-forms)"
        )
    if not given:
        return SPARSE_BACKEND, (
            f"{f('attention_backend')} unset: SGLang runs {model.name} on its {SPARSE_BACKEND} backend, "
            "the one that runs its sparse attention (each query over its top-k tokens past the first "
            f"{model.sparse_attention.index_topk:,})"
        )
    if given == SPARSE_BACKEND:
        return given, None
    return given, (
        f"{f('attention_backend')} {given}: SGLang skips {model.name}'s sparse-attention indexer on this "
        "backend and attends to every token, as DeepSeek-V3 does (the pool still holds the indexer's keys)"
    )


def _linear_state(
    parsed: ParsedLaunch, model: ModelSpec, base: LaunchConfig, vram_bytes: int, mfs: float
) -> tuple[LaunchConfig, tuple[str, ...]]:
    """The linear-attention state pool the command starts with (docs/memory.md#linear-attention-state):
    `--max-mamba-cache-size` as given, else as SGLang sizes it: `--max-running-requests` slots with
    the radix cache off, else a share of the memory after the weights that the KV pool then lacks."""
    f = flag_name
    no_radix = parsed.given("disable_radix_cache")
    per = linear_state_bytes_per_request(model, base.tp)
    if per <= 0:
        given = [f(k) for k in ("linear_state_slots", "mamba_full_memory_ratio") if parsed.given(k)]
        notes = (f"{', '.join(given)}: {model.name} has no linear-attention layers; no effect",) if given else ()
        if no_radix:
            notes += (f"{f('disable_radix_cache')}: no prefix reuse; the prediction assumes none anyway",)
        return base, notes
    if parsed.given("linear_state_slots"):
        slots = int(parsed.get("linear_state_slots"))
        if slots < 1:
            raise UserError(f"{f('linear_state_slots')} {slots} must be at least 1", "pass e.g. 24")
        return replace(base, linear_state_slots=slots), ()
    running = int(parsed.get("max_running_requests", 0)) if no_radix else 0
    ratio = float(parsed.get("mamba_full_memory_ratio", MAMBA_FULL_MEMORY_RATIO))
    if ratio <= 0:
        raise UserError(f"{f('mamba_full_memory_ratio')} {ratio:g} must be positive", "pass e.g. 0.9")
    slots = linear_state_slots_at_start(model, base, vram_bytes, mfs, ratio, running_if_no_radix=running)
    if slots < 1:
        raise InfeasibleError(
            f"SGLang keeps no linear-attention request state at start: {ratio:g} / {1 + ratio:g} of what "
            f"{f('mem_fraction_static')} {mfs:g} leaves after the weights holds no {per / MIB:.1f} MiB state, "
            "so it runs no request",
            f"pass {f('linear_state_slots')} N, or raise {f('mem_fraction_static')}",
        )
    gib = slots * per / GIB
    if running:
        why = f"{f('disable_radix_cache')} with {f('max_running_requests')} {running}: one slot per request"
    else:
        why = (
            f"{ratio:g} / {1 + ratio:g} of what {f('mem_fraction_static')} {mfs:g} leaves after the weights, "
            "which the KV pool then lacks"
        )
    return replace(base, linear_state_slots=slots), (
        f"{f('linear_state_slots')} unset: SGLang keeps {slots} linear-attention request states "
        f"({gib:.2f} GiB, {per / MIB:.1f} MiB each): {why}",
    )


@dataclass(frozen=True)
class FlagChange:
    flag: str  # as sglang-kt spells it
    yours: str
    kttune: str
    why: str


def flag_changes(yours, pick, crossover: int | None, cores: int, workload: Workload) -> tuple[FlagChange, ...]:
    """The flags where the search's pick differs from the user's configuration, each with why, from
    the two evaluations (kttune.search.evaluate.Evaluation) on the same inputs; `crossover`: the
    pick's crossover (kttune.cost.prefill.crossover_tokens)."""
    a, b = yours.cfg, pick.cfg
    over = "vram" in yours.violated
    out = []

    def add(key: str, va, vb, why: str) -> None:
        if va != vb:
            out.append(
                FlagChange(
                    flag_name(key),
                    f"{va:,}" if isinstance(va, int) else str(va),
                    f"{vb:,}" if isinstance(vb, int) else str(vb),
                    why,
                )
            )

    add(
        "num_gpu_experts",
        a.num_gpu_experts,
        b.num_gpu_experts,
        "yours does not fit the VRAM budget"
        if over and b.num_gpu_experts < a.num_gpu_experts
        else "more of the routed experts run on the GPU, in VRAM yours leaves free"
        if b.num_gpu_experts > a.num_gpu_experts
        else "their VRAM serves the chunk and the KV pool better",
    )
    add(
        "chunked_prefill_size",
        a.chunked_prefill_size,
        b.chunked_prefill_size,
        "fewer forwards per long prompt: each layerwise forward streams every MoE layer once"
        if b.chunked_prefill_size > a.chunked_prefill_size
        else (
            "yours does not fit the VRAM budget (its activations and the layerwise slot grow with it)"
            if over
            else "its activation VRAM serves GPU experts or the KV pool better"
        ),
    )
    thr_b = b.gpu_prefill_token_threshold
    add(
        "gpu_prefill_token_threshold",
        a.gpu_prefill_token_threshold,
        thr_b,
        "layerwise does not pay for this workload's forwards"
        if thr_b == 0
        else (
            f"the two paths cross at {crossover:,} tokens per forward"
            if crossover and thr_b <= crossover * 1.5 + 64
            else "fastest on the workload's prompt lengths"
        ),
    )
    per = workload.mean_prompt_tokens + workload.output_tokens
    add(
        "max_total_tokens",
        a.max_total_tokens,
        b.max_total_tokens,
        f"holds the workload's {workload.concurrency} requests of {per:,.0f} tokens at once"
        if b.max_total_tokens > a.max_total_tokens
        else (
            "yours does not fit the VRAM budget"
            if over
            else "a pool larger than the workload needs takes VRAM from experts or the chunk"
        ),
    )
    add(
        "cpuinfer_threads",
        a.cpuinfer_threads,
        b.cpuinfer_threads,
        f"a pool on all {cores} cores starves the thread that drives it"
        if a.cpuinfer_threads >= cores
        else "the fastest count on the profile's measured CPU curves",
    )
    add(
        "threadpool_count",
        a.threadpool_count,
        b.threadpool_count,
        "one pool per NUMA node, as the profile was measured",
    )
    add(
        "max_running_requests",
        a.max_running_requests,
        b.max_running_requests,
        "the requests of the workload the pool holds at once (SGLang admits no more)",
    )
    add(
        "linear_state_slots",
        a.linear_state_slots,
        b.linear_state_slots,
        f"{LINEAR_STATE_SLOTS_PER_REQUEST} linear-attention states per running request, set so that they do not "
        "take the KV pool's room (docs/memory.md#linear-attention-state)",
    )
    mla = LAUNCH_ATTENTION_BACKEND["mla"]  # only MLA models carry a backend in their configs
    ya, yb = a.attention_backend or mla, b.attention_backend or mla
    if a.attention_backend or b.attention_backend:
        add(
            "attention_backend",
            ya,
            yb,
            "over a long cached prefix it attends in the latent form (3.4x the flops), in VRAM yours spends "
            "expanding the prefix"
            if yb == mla
            else "its sparse attention: each query over its top-k tokens"
            if yb == SPARSE_BACKEND
            else "it expands a long cached prefix in one shot instead of attending in the latent form "
            "(docs/cost-model.md#mla-prefill-forms)",
        )
    return tuple(out)
