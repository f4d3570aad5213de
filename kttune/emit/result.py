"""The machine-readable result of a search or an explanation (`--json`)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from kttune.hw.profile import HardwareProfile
from kttune.search.evaluate import Budget, Evaluation
from kttune.search.workload import Workload
from kttune.spec.model_spec import ModelSpec


def kttune_version() -> str:
    try:
        return version("kttune")
    except PackageNotFoundError:
        return "unknown"


def evaluation_dict(ev: Evaluation) -> dict:
    return {
        "flags": ev.cfg.to_dict(),
        "predicted": {
            "mean_prefill_ms": ev.mean_ttft_ms,
            "prefill_ms_by_prompt_tokens": {str(p): t for p, t in ev.ttft_ms},
            "prefill_tok_s_by_prompt_tokens": {str(p): p / (t / 1e3) for p, t in ev.ttft_ms},
            "decode_batch": ev.decode_batch,
            "decode_step_ms": ev.tbt_ms,
            "decode_tok_s": ev.decode_tok_s,
        },
        "vram_bytes_per_gpu": ev.vram.to_dict(),
        "host_ram_bytes": ev.host.to_dict(),
        "constraints": ev.constraints,
        "feasible": ev.feasible,
    }


def context_dict(model: ModelSpec, profile: HardwareProfile, workload: Workload, budget: Budget, method: str) -> dict:
    return {
        "kttune_version": kttune_version(),
        "model": {"name": model.name, "family": model.family, "source": model.source, "method": method,
                  "checkpoint_format": model.checkpoint_format, "experts": model.num_experts, "top_k": model.top_k,
                  "moe_layers": model.num_moe_layers, "hidden_size": model.hidden_size,
                  "moe_intermediate_size": model.moe_intermediate_size, "non_expert_bytes": model.non_expert_bytes,
                  "non_expert_bytes_measured": model.non_expert_bytes_measured is not None},
        "profile": {"machine": profile.provenance.machine, "kind": profile.provenance.kind,
                    "fingerprint": profile.fingerprint, "created": profile.provenance.created,
                    "notes": list(profile.provenance.notes)},
        "workload": {"name": workload.name, "prompt_tokens": list(workload.prompt_tokens), "weights": list(workload.weights),
                     "output_tokens": workload.output_tokens, "concurrency": workload.concurrency,
                     "decode_weight": workload.decode_weight},
        "budget": {"vram_bytes_per_gpu": budget.vram_bytes_per_gpu, "host_ram_bytes": budget.host_ram_bytes,
                   "vram_margin": budget.vram_margin},
    }
