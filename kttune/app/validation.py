"""`kttune validate`: the flags as `kttune explain` takes them, run for real on sglang-kt
(kttune.validate.run launches, measures and stops the server), compared with the prediction, and
the corrections written into the profile when asked."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from kttune.app import serialize
from kttune.app.inputs import Inputs
from kttune.app.search_explain import explain_flags
from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.errors import ParameterError, UserError
from kttune.validate.run import ValidateRequest, ValidationResult, run_validation, write_corrections


@dataclass(frozen=True)
class ValidateOutcome:
    result: ValidationResult
    cfg: LaunchConfig
    emitted_argv: list[str]
    lengths: tuple[int, ...]
    timeout_s: float
    profile_written: str | None

    def to_dict(self) -> dict:
        return serialize.validation_dict(self)


def server_module_importable(python: str, module: str) -> bool:
    """Whether `python` can find `module` (the real server, or a stand-in), without importing it."""
    import subprocess

    top = module.split(".")[0]
    code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({top!r}) else 1)"
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def check_profile_out(inp: Inputs, out: str | Path, inputs=()) -> Path:
    """Where the corrected profile goes: refused (one line) before the server is launched when the
    file holds anything but this machine's measured profile (kttune.documents)."""
    from kttune.documents import check_output_file, profile_output_from

    return check_output_file(out, profile_output_from("kttune validate", inp.request.profile), inputs=inputs)


def validate(
    inp: Inputs,
    gpu_experts: int,
    chunk: int = 8192,
    threshold: int = 0,
    max_total_tokens: int = 65536,
    cpuinfer: int | None = None,
    repeats: int = 2,
    timeout_s: float | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    python: str | None = None,
    server_module: str = "sglang.launch_server",
    log_path: str | None = None,
    write_profile: bool = True,
    out: str | None = None,
    on_event: Callable[[str, dict], None] | None = None,
) -> ValidateOutcome:
    """`kttune validate`: the flags as `kttune explain` takes them (`inp` from
    kttune.app.resolve_inputs), run for real. Raises UserError for what must be fixed before a
    launch makes sense."""
    from kttune.memory.host import cpu_expert_bytes
    from kttune.paths import cache_dir, profile_cache_path
    from kttune.search.launch import ENV
    from kttune.validate.plan import prompt_lengths, readiness_timeout_s

    if repeats < 1:
        raise ParameterError("repeats", f"{repeats} must be at least 1", "pass e.g. {repeats} 2")
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ParameterError(
            "host", f"{host} is not a loopback address", "validation serves on loopback only: use 127.0.0.1"
        )
    if out is not None and write_profile:
        check_profile_out(inp, out)
    python = python or sys.executable
    if server_module == "sglang.launch_server":
        if any(p.startswith("/path/to/") for p in (inp.paths.model_path, inp.paths.weight_path)):
            raise UserError(
                "validation launches the real server, which needs the model's files",
                "pass {model_path} DIR (and {weight_path} DIR for converted CPU weights)",
                params=("model_path", "weight_path"),
            )
    if not server_module_importable(python, server_module):
        raise UserError(
            f"{python} cannot import {server_module.split('.')[0]} (sglang-kt is not installed there)",
            "install sglang-kt==0.7.2 and kt-kernel==0.7.2, or pass {python} PATH of the environment that has them",
            params=("python",),
        )
    r = inp.request
    # factors are relative to the raw model: compare against the profile without its calibration
    comp = Components(replace(r.profile, calibration=()), r.model, r.method, r.tp)
    ex = explain_flags(inp, gpu_experts, chunk, threshold, max_total_tokens, cpuinfer)
    emitted = list(ex.argv)
    cfg = ex.evaluation.cfg
    lengths = tuple(prompt_lengths(r.workload.prompt_tokens, cfg, r.model.max_position_embeddings))
    wait = (
        timeout_s
        if timeout_s is not None
        else readiness_timeout_s(r.model.non_expert_bytes + cpu_expert_bytes(r.model, r.method))
    )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    logp = Path(log_path) if log_path else cache_dir() / "validate" / f"server-{stamp}.log"
    req = ValidateRequest(
        emitted_argv=emitted,
        cfg=cfg,
        lengths=lengths,
        vocab_size=r.model.vocab_size,
        timeout_s=wait,
        log_path=logp,
        repeats=repeats,
        host=host,
        port=port,
        python=python,
        server_module=server_module,
        env=dict(ENV),
    )
    res = run_validation(req, comp, on_event)
    written = None
    if write_profile and res.ok and res.comparison and res.comparison.corrections:
        target = Path(out) if out else profile_cache_path(r.profile.fingerprint or "unfingerprinted")
        written = str(write_corrections(r.profile, res.comparison.corrections, target))
    return ValidateOutcome(res, cfg, emitted, lengths, wait, written)
