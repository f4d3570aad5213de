"""A flag set a user gives (explain, validate, simulate, a launch command): the rules sglang-kt
0.7.2 sets on it and the defaults kttune fills in, in one place. Errors name the parameters
(`threshold`, `cpuinfer`, `gpu_experts`; kttune.errors)."""

from __future__ import annotations

from typing import Sequence

from kttune.errors import ParameterError
from kttune.spec.methods import METHODS, KtMethod
from kttune.spec.model_spec import ModelSpec

# the methods with a layerwise path, the ones a threshold > 0 may be used with
NATIVE_METHODS = ", ".join(m.name for m in METHODS.values() if m.layerwise)


def usable_threads(measured: Sequence[int], cores: int) -> list[int]:
    """The measured `--kt-cpuinfer` counts below the core count (a pool on every core starves the
    thread that drives it: docs/sglang-kt.md), or all of them where none is below."""
    threads = sorted(measured)
    return [t for t in threads if t < cores] or threads


def default_cpuinfer_threads(measured: Sequence[int], cores: int) -> int:
    """`--kt-cpuinfer` left unset: the most measured threads below the core count."""
    return max(usable_threads(measured, cores))


def cpuinfer_threads(measured: Sequence[int], cores: int, given: int | None) -> int:
    """The thread count to model: `given`, which the profile must have measured (or the app layer
    interpolated between two measured counts: `kttune.hw.thread_interp`), else the default."""
    th = given if given is not None else default_cpuinfer_threads(measured, cores)
    if th not in measured:
        ms = sorted(measured)
        below = [t for t in ms if t < cores]
        between = f", a count between {below[0]} and {below[-1]} (interpolated)" if len(below) >= 2 else ""
        raise ParameterError(
            "cpuinfer",
            f"{th} is not a thread count this profile measured ({', '.join(map(str, ms))}) nor one between two "
            f"it measured below the {cores} cores",
            f"use one of them{between}, or measure it: `kttune probe --threads {th}`",
        )
    return th


def threshold_crashes(method: KtMethod, threshold: int) -> bool:
    """A threshold > 0 makes sglang-kt 0.7.2 crash at the first forward that reaches it unless the
    method has a layerwise path (docs/sglang-kt.md#the-threshold-must-be-0-for-non-native-methods,
    ktransformers#2113)."""
    return threshold > 0 and not method.layerwise


def check_threshold(method: KtMethod, threshold: int) -> None:
    """A flag set kttune is given (explain, validate, simulate): `threshold_crashes` is bad input.
    (A whole launch command that does it is "infeasible": kttune.search.launch_command.)"""
    if threshold_crashes(method, threshold):
        raise ParameterError(
            "threshold",
            f"{threshold} with {method.name}: sglang-kt 0.7.2 crashes when layerwise fires for this method",
            f"use {{threshold}} 0, or a native method ({NATIVE_METHODS})",
        )


def check_gpu_experts(model: ModelSpec, gpu_experts: int) -> None:
    """GPU experts are counted per MoE layer: at most the layer's experts."""
    if gpu_experts > model.num_experts:
        raise ParameterError(
            "gpu_experts",
            f"{gpu_experts} exceeds the {model.num_experts} experts per layer",
            f"pass 0..{model.num_experts}",
        )
