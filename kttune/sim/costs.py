"""Iteration times and expert traffic of one server iteration, from the cost model.

Every time here comes from kttune.cost's public functions (moe_layer, hybrid_moe_layer, non_moe_ms,
decode_step_ms's parts), so whatever calibration the cost model applies flows in. Calls are memoised
per token count (a bounded LRU each); the KV-read part of decode is piecewise linear in the summed
context (`kv_ms`), so a decode step of any batch is one memo lookup plus a few multiplies.

An iteration runs `prefill` tokens (one or more prompt segments, each after its own prefix) together
with `decode` tokens (one per running request, `--enable-mixed-chunk`), through `group` decoder
layers (all of them for token-chunked prefill; one layer group for Layered Prefill, the other layers
then run the decode tokens alone):

    ms = n_moe_g x layer(P + D) + (MoE layers - n_moe_g) x hybrid(D)
         + (layers_g / layers) x sum_seg non_moe(seg, prefix)         (prefill attention, dense)
         + (1 - layers_g / layers) x W + sum_i k_i min(sum_ctx, D cap_i)  (decode weight and KV reads)
         + forward overhead

where layer(M) takes KT's per-forward path (layerwise at M >= threshold), W is the decode step's
non-expert weight read and k_i its KV read per context token of each layer kind, read up to cap_i
tokens a request (inf for full attention; the window, or a sparse-attention model's top-k:
kttune.cost.components.decode_kv_terms).
A decode-only step is exactly kttune.cost.decode.decode_step_ms, and a prefill forward of one
segment with no decode is exactly kttune.cost.prefill.forward_time.

Traffic per MoE layer and forward of M tokens (bytes; the router model gives the distinct experts
d(M) the tokens activate, kttune.sim.router):
- layerwise: PCIe = streamed experts x GPU bytes per expert (KT sends whole layers), host read =
  streamed x CPU bytes per expert (stage A reads them), HBM = d(M) x GPU bytes per expert;
- hybrid: PCIe = 0 (activations only), HBM = d(M) x n/E x GPU bytes, host read = d(M) x (E-n)/E x
  CPU bytes (GPU experts taken as a random subset of the popularity ranks).
Busy time: CPU = CPU experts (hybrid) or stage A writes (layerwise); GPU = attention, dense and GPU
experts (and the INT4 repack of stage C); PCIe copies and waits are neither.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from kttune.config import LaunchConfig
from kttune.cost.components import FORWARD_OVERHEAD_MS, Components
from kttune.cost.prefill import forward_path, hybrid_moe_layer, moe_layer, non_moe_ms, streamed_experts_per_layer
from kttune.sim.router import expected_distinct_experts

CACHE_ENTRIES = 1 << 14  # per memo (token counts up to the chunk size, mostly)


@dataclass(frozen=True)
class LayerCost:
    """One MoE layer in one forward of M tokens."""

    ms: float
    cpu_ms: float
    gpu_ms: float
    pcie_bytes: float
    hbm_bytes: float
    host_bytes: float
    layerwise: bool


class Step(NamedTuple):
    """One iteration: its time, busy time and expert-weight traffic (a NamedTuple: the engine
    makes one per iteration, millions in a long run)."""

    ms: float
    gpu_ms: float
    cpu_ms: float
    pcie_bytes: float
    hbm_bytes: float
    host_bytes: float
    layerwise_layers: int  # MoE layers of this iteration that took the layerwise path


def layer_groups(num_layers: int, moe_layer_ids: tuple[int, ...], groups: int) -> tuple[tuple[int, int], ...]:
    """(decoder layers, MoE layers) of each of `groups` contiguous groups, split as evenly as
    numpy.array_split would (the first num_layers mod G groups one layer longer)."""
    g = max(1, min(groups, num_layers))
    base, extra = divmod(num_layers, g)
    out, start, moe = [], 0, set(moe_layer_ids)
    for i in range(g):
        n = base + (1 if i < extra else 0)
        out.append((n, sum(1 for layer in range(start, start + n) if layer in moe)))
        start += n
    return tuple(out)


class IterationCosts:
    """Memoised iteration costs of one (profile, model, method, flags) and router skew."""

    def __init__(self, comp: Components, cfg: LaunchConfig, router_skew: float = 0.0) -> None:
        self.comp, self.cfg, self.skew = comp, cfg, router_skew
        m = comp.model
        self.model = m
        self.num_layers, self.num_moe = m.num_layers, m.num_moe_layers
        self.n_gpu = min(cfg.num_gpu_experts, m.num_experts)
        self.streamed = streamed_experts_per_layer(comp, cfg)
        backend = cfg.attention_backend or None
        self.w_ms = comp.decode_dense_ms(1, 0.0, backend)
        self.kv_terms = comp.decode_kv_terms(backend)
        # bounded: a long run meets millions of (tokens, prefix) pairs
        self._layer = lru_cache(maxsize=CACHE_ENTRIES)(self._layer_cost)
        self._hybrid = lru_cache(maxsize=CACHE_ENTRIES)(self._hybrid_cost)
        self._nonmoe = lru_cache(maxsize=CACHE_ENTRIES // 4)(
            lambda t, p: non_moe_ms(comp, t, p, backend)
        )  # (tokens, prefix): few repeat
        self._groups = lru_cache(maxsize=CACHE_ENTRIES)(lambda g: layer_groups(m.num_layers, m.moe_layer_ids, g))

    # ---- per MoE layer -------------------------------------------------------------------------
    def _traffic(self, tokens: int, layerwise: bool) -> tuple[float, float, float]:
        m, c = self.model, self.comp
        d = expected_distinct_experts(tokens, m.top_k, m.num_experts, self.skew)
        if layerwise:
            return (
                self.streamed * c.gpu_bytes_per_expert,
                d * c.gpu_bytes_per_expert,
                self.streamed * c.cpu_bytes_per_expert,
            )
        share_gpu = self.n_gpu / m.num_experts
        return 0.0, d * share_gpu * c.gpu_bytes_per_expert, d * (1.0 - share_gpu) * c.cpu_bytes_per_expert

    def _layer_cost(self, tokens: int) -> LayerCost:
        lt = moe_layer(self.comp, self.cfg, tokens)
        return self._cost_of(lt, tokens)

    def _hybrid_cost(self, tokens: int) -> LayerCost:
        return self._cost_of(hybrid_moe_layer(self.comp, self.cfg, tokens), tokens)

    def _cost_of(self, lt, tokens: int) -> LayerCost:
        lw = lt.path == "layerwise"
        pcie, hbm, host = self._traffic(tokens, lw)
        if lw:
            return LayerCost(lt.total_ms, lt.stage_a_ms, lt.gpu_ms + lt.stage_c_ms, pcie, hbm, host, True)
        return LayerCost(lt.total_ms, lt.cpu_ms, lt.gpu_ms, pcie, hbm, host, False)

    def path(self, tokens: int) -> str:
        return forward_path(self.comp, self.cfg, tokens)

    # ---- the decode KV read ----------------------------------------------------------------------
    def kv_ms(self, batch: int, sum_ctx: float) -> float:
        """The KV read of `batch` requests whose contexts sum to `sum_ctx`, each taken at the average
        (a term capped at `cap` tokens reads min(sum_ctx, batch x cap): exact when every request is
        on the same side of the cap, an upper bound otherwise)."""
        return sum(k * min(sum_ctx, batch * cap) for k, cap in self.kv_terms)

    def kv_growth(self, batch: int, sum_ctx: float) -> tuple[float, float]:
        """(ms the decode step grows by per iteration, iterations it keeps growing so): while every
        request gains a token a step, kv_ms grows by k x batch for each term below its cap, until
        the first term reaches it (inf: none will)."""
        slope, steps = 0.0, math.inf
        for k, cap in self.kv_terms:
            room = batch * cap - sum_ctx
            if room > 0:
                slope += k * batch
                if cap != math.inf:
                    steps = min(steps, math.floor(room / batch) + 1)
        return slope, steps

    # ---- iterations ----------------------------------------------------------------------------
    def decode(self, batch: int, sum_ctx: float) -> Step:
        """A decode-only iteration of `batch` requests whose contexts sum to `sum_ctx`
        (= kttune.cost.decode.decode_step_ms(batch, sum_ctx / batch))."""
        h = self._hybrid(batch)
        dense = self.w_ms + self.kv_ms(batch, sum_ctx)
        n = self.num_moe
        return Step(n * h.ms + dense, n * h.gpu_ms + dense, n * h.cpu_ms, 0.0, n * h.hbm_bytes, n * h.host_bytes, 0)

    def forward(
        self, segments: list[tuple[int, int]], decode: int, sum_ctx: float, groups: int = 1, group: int = 0
    ) -> Step:
        """Prefill `segments` [(tokens, prefix)] with `decode` decode tokens riding along, through
        layer group `group` of `groups` (groups=1: every layer, token-chunked prefill)."""
        p = sum(s for s, _ in segments)
        if p == 0:
            return self.decode(decode, sum_ctx)
        layers_g, moe_g = self._groups(groups)[group] if groups > 1 else (self.num_layers, self.num_moe)
        frac = layers_g / self.num_layers
        lc = self._layer(p + decode)
        ms = moe_g * lc.ms
        gpu, cpu = moe_g * lc.gpu_ms, moe_g * lc.cpu_ms
        pcie, hbm, host = moe_g * lc.pcie_bytes, moe_g * lc.hbm_bytes, moe_g * lc.host_bytes
        rest = self.num_moe - moe_g
        if decode > 0:
            if rest:
                h = self._hybrid(decode)
                ms += rest * h.ms
                gpu += rest * h.gpu_ms
                cpu += rest * h.cpu_ms
                hbm += rest * h.hbm_bytes
                host += rest * h.host_bytes
            dense = (1.0 - frac) * self.w_ms + self.kv_ms(decode, sum_ctx)
            ms += dense
            gpu += dense
        other = sum(self._nonmoe(s, x) for s, x in segments) * frac
        ms += other + FORWARD_OVERHEAD_MS
        gpu += other
        return Step(ms, gpu, cpu, pcie, hbm, host, moe_g if lc.layerwise else 0)

    def group_count(self, tokens: int, group_tokens: int = 512) -> int:
        """Layered Prefill's group rule: G = max(1, ceil(T / 512)), at most one group per layer."""
        return max(1, min(self.num_layers, math.ceil(tokens / group_tokens)))
