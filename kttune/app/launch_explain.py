"""`kttune explain -- python -m sglang.launch_server ...`: a user's own launch command, read
(kttune.spec.launch_args), completed with SGLang's defaults (kttune.search.launch_command),
explained on the profile, and set beside what the search picks on the same inputs."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from kttune.app import serialize
from kttune.app.inputs import components_at, resolve_inputs, this_machine_inventory
from kttune.app.search_explain import ExplainOutcome, SearchOutcome, command_for, search
from kttune.errors import InfeasibleError, UserError
from kttune.memory.vram import DEFAULT_VRAM_MARGIN
from kttune.search.explain import explain
from kttune.search.launch import LaunchPaths
from kttune.search.launch_command import (
    FlagChange,
    ResolvedLaunch,
    attention_backend_of,
    flag_changes,
    method_of,
    resolve_launch,
)
from kttune.search.request import check_request
from kttune.spec.catalog import resolve_catalog_name
from kttune.spec.launch_args import ParsedLaunch, flag_name, parse_launch_command
from kttune.units import MIB

COMPARE_TRIALS = 200


@dataclass(frozen=True)
class LaunchExplainOutcome:
    """The command read, what kttune made of it, its explanation, and the search's pick on the
    same inputs (None with compare=False)."""

    parsed: ParsedLaunch
    resolved: ResolvedLaunch
    explained: ExplainOutcome
    search: SearchOutcome | None
    search_problem: UserError | None = None  # why the search found nothing, when it did not

    @property
    def feasible(self) -> bool:
        return self.explained.feasible

    @property
    def changes(self) -> tuple[FlagChange, ...]:
        """The flags the search's pick changes, each with why (none without the comparison)."""
        if self.search is None:
            return ()
        req = self.explained.inputs.request
        return flag_changes(
            self.explained.evaluation,
            self.search.best,
            self.search.explanation.crossover_tokens,
            req.profile.inventory.cpu.physical_cores or 10**9,
            req.workload,
        )

    @property
    def notes(self) -> tuple[str, ...]:
        return self.parsed.notes() + self.resolved.notes

    def named(self, spell) -> "LaunchExplainOutcome":
        """The outcome with the parameters its search problem names spelled by `spell`
        (kttune.errors.UserError.named)."""
        return replace(self, search_problem=self.search_problem.named(spell)) if self.search_problem else self

    def to_dict(self) -> dict:
        return serialize.launch_explain_dict(self)


def _model_arg(parsed: ParsedLaunch, model: str | None) -> str:
    """`model` (NAME|PATH), else the command's model directory when it exists here, else the
    catalog entry its directory is named after (e.g. /models/Kimi-K2-Thinking)."""
    if model:
        return model
    path = parsed.get("model_path")
    if path is None:
        raise UserError(
            f"the command has no {flag_name('model_path')}",
            f"add {flag_name('model_path')} DIR to it, or pass {{model}} NAME",
            params=("model",),
        )
    if os.path.isdir(os.path.expanduser(str(path))):
        return str(path)
    name = resolve_catalog_name(Path(str(path).rstrip("/")).name)
    if name is None:
        raise UserError(
            f"{flag_name('model_path')} {path} is not a directory here nor named after a catalog model",
            "pass {model} NAME (`kttune models`) or the model directory",
            params=("model",),
        )
    return name


def _vram_bytes(vram_bytes: int | None, profile: str | None) -> int:
    """`vram_bytes`, else the profile's GPU memory (whole MiB)."""
    if vram_bytes:
        return vram_bytes
    from kttune.hw.registry import resolve_profile

    prof = resolve_profile(profile, this_machine_inventory())
    gpus = prof.inventory.gpus
    if not gpus or not gpus[0].vram_total_bytes:
        raise UserError(
            "the profile names no GPU memory",
            "pass {vram_bytes}, e.g. {vram_bytes} 24G (per GPU)",
            params=("vram_bytes",),
        )
    return gpus[0].vram_total_bytes // MIB * MIB


def explain_command(
    command: str | Sequence[str],
    model: str | None = None,
    vram_bytes: int | None = None,
    profile: str | None = None,
    workload: str = "rag",
    host_ram_bytes: int | None = None,
    vram_margin: float = DEFAULT_VRAM_MARGIN,
    compare: bool = True,
    trials: int = COMPARE_TRIALS,
    storage: str | None = None,
) -> LaunchExplainOutcome:
    """Explain a sglang-kt 0.7.2 launch command (a shell string or its words) on a profile: the
    same prediction as `explain_flags` with the equivalent flags, plus the search's pick on the
    same inputs when `compare`. `model` None: the command's model directory (or the catalog model
    it is named after); `vram_bytes` None: the profile's GPU memory. UserError on a command kttune
    cannot read; InfeasibleError on one that cannot run as a KT launch."""
    parsed = parse_launch_command(command)
    method, method_notes = method_of(parsed)
    inp = resolve_inputs(
        _model_arg(parsed, model),
        _vram_bytes(vram_bytes, profile),
        int(parsed.get("tp", 1)),
        profile,
        workload,
        method,
        host_ram_bytes,
        vram_margin,
        model_path=str(parsed.get("model_path")) if parsed.given("model_path") else None,
        weight_path=str(parsed.get("weight_path")) if parsed.given("weight_path") else None,
    )
    req = inp.request
    # a --kt-cpuinfer between two measured counts: interpolated for the command's own prediction; the
    # search's pick below keeps to the measured counts (kttune.app.inputs.components_at)
    given = int(parsed.get("cpuinfer_threads")) if parsed.given("cpuinfer_threads") else None
    backend = attention_backend_of(parsed, req.model)[0]
    comp = components_at(req.profile, req.model, req.method, req.tp, given, backend)
    cpu = req.profile.inventory.cpu
    resolved = resolve_launch(
        parsed,
        req.model,
        req.method,
        req.budget.vram_bytes_per_gpu,
        req.workload,
        comp.cpu_thread_options(),
        cpu.physical_cores or 10**9,
        max(1, len(cpu.numa_nodes)),
    )
    # the backend the server runs, SGLang's pick for the GPU where the command leaves it unset: in
    # the config, so that the memory and the times are the ones that backend makes
    cfg = replace(resolved.cfg, attention_backend=comp.mla_backend if req.model.attention == "mla" else "")
    resolved = replace(resolved, cfg=cfg, notes=method_notes + resolved.notes)
    check_request(req)
    ex = explain(comp, resolved.cfg, req.workload, req.budget)
    paths = LaunchPaths(inp.paths.model_path, inp.paths.weight_path, ())  # the user's own paths: nothing to replace
    inp = replace(inp, paths=paths)
    explained = ExplainOutcome(inp, ex, tuple(command_for(inp, ex.evaluation)))
    pick, problem = None, None
    if compare:
        try:
            pick = search(inp, trials=trials, seed=0, storage=storage)
        except InfeasibleError as e:
            problem = e
    return LaunchExplainOutcome(parsed, resolved, explained, pick, problem)
