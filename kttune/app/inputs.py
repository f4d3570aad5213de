"""A request resolved from typed values (bytes, counts, names): the model, method, profile,
workload, budget and TP of a search, explain, validate or tune, and where the weights are for the
launch command. Bad input raises UserError naming the parameter (kttune.errors)."""

from __future__ import annotations

from dataclasses import dataclass

from kttune import bounds
from kttune.cost.components import Components
from kttune.errors import ParameterError, UserError
from kttune.hw.profile import HardwareProfile, Inventory
from kttune.hw.thread_interp import with_thread_count
from kttune.memory.vram import DEFAULT_VRAM_MARGIN
from kttune.search.evaluate import Budget, HostRamSource
from kttune.search.launch import LaunchPaths, default_paths
from kttune.search.space import check_chunks
from kttune.search.request import SearchRequest
from kttune.search.workload import load_workload
from kttune.spec.launch_args import check_attention_backend
from kttune.spec.loader import load_model
from kttune.spec.methods import get_method
from kttune.units import GIB


def this_machine_inventory() -> Inventory | None:
    """This machine's inventory, for finding its cached probe (the hardware layer is handed it and
    never inventories the machine itself); None where the machine cannot be inventoried."""
    from kttune.probes.inventory import collect_inventory

    try:
        return collect_inventory()
    except Exception:  # an odd /proc or NVML must not stop a search that can use a shipped profile
        return None


@dataclass(frozen=True)
class Inputs:
    """A resolved request (model, method, profile, workload, budget, TP: the fields live in
    `SearchRequest` alone) and where the weights are, for the launch command."""

    request: SearchRequest
    paths: LaunchPaths
    # What the loader and the inputs say about the request (wrong method for the checkpoint,
    # an untested family, clipped prompts): printed in the report, listed in the JSON.
    notes: tuple[str, ...] = ()


def components_at(
    profile: HardwareProfile, model, method: str, tp: int, cpuinfer: int | None, attention_backend: str = ""
) -> Components:
    """The cost model of `profile` for a flag set with `cpuinfer` kt-kernel workers: where the profile did
    not measure that count but counts on both sides of it, its curves there interpolated
    (`kttune.hw.thread_interp`) and the note that says so among the model's notes; else the profile's
    own (a count outside the measured range stays an error of
    `kttune.search.user_flags.cpuinfer_threads`). A search keeps to the measured counts: it builds
    its model from the profile itself. `attention_backend`: the command's (Components.attention_backend)."""
    note = None
    if cpuinfer is not None:
        profile, note = with_thread_count(profile, cpuinfer)
    comp = Components(profile, model, method, tp, attention_backend=attention_backend)
    if note:
        comp.notes.append(note)
    return comp


def check_vram_bytes(vram_bytes: int, shown: str | None = None) -> int:
    """A per-GPU VRAM budget no GPU exceeds (a typo such as 9999T is refused, not searched).
    `shown`: the value as the caller wrote it, for the message."""
    if vram_bytes > bounds.VRAM_BYTES_PER_GPU.hi:
        raise ParameterError(
            "vram_bytes",
            f"{shown or vram_bytes} is {vram_bytes / GIB:,.0f} GiB per GPU, more than any "
            "GPU holds (the largest hold 288 GB: B300, MI355X)",
            "{vram_bytes} is per GPU: pass one card's memory, e.g. {vram_bytes} 141G for an H200, and "
            "the count with {gpus}",
            also=("gpus",),
        )
    return bounds.VRAM_BYTES_PER_GPU.check(vram_bytes, "vram_bytes")


def check_host_ram_bytes(host_ram_bytes: int, shown: str | None = None) -> int:
    """Host RAM no server exceeds; `shown` as in check_vram_bytes."""
    if host_ram_bytes > bounds.HOST_RAM_BYTES.hi:
        raise ParameterError(
            "host_ram_bytes",
            f"{shown or host_ram_bytes} is {host_ram_bytes / (1024 * GIB):,.0f} TiB, more than any server holds",
            "pass the target machine's RAM, e.g. {host_ram_bytes} 512G",
        )
    return bounds.HOST_RAM_BYTES.check(host_ram_bytes, "host_ram_bytes")


def measured_elsewhere_note(
    profile: HardwareProfile, name: str | None, here: Inventory | None, model: str
) -> str | None:
    """What a plan on a profile measured on another machine may miss, or None for this machine's own
    profile (`name` None, or the same fingerprint) and for derived ones (their curves carry labels).
    The figures are the H200 box's, where one machine kind ran on many instances
    (docs/cost-model.md#one-machine-instance-seven-models, #the-instances-own-quick-probe)."""
    from kttune.hw.fingerprint import is_this_machine

    if name is None or profile.provenance.kind != "measured":
        return None
    if here is not None and is_this_machine(here, profile.fingerprint):
        return None
    return (
        f"profile {name!r} was measured on another machine ({profile.provenance.machine}): on instances of "
        "that one machine kind kt-kernel's CPU times moved by up to 1.9x, and over 24 sweeps of 9 models on quiet hosts the "
        "crossover predicted from another instance's profile agreed with the measured one 14 times, from the "
        "serving instance's own `kttune probe --quick` (about a minute, no model measured) 20 times "
        "(docs/cost-model.md#the-instances-own-quick-probe); run `kttune probe --quick` here, or "
        f"`kttune tune --model {model} --vram ...`, which measures this machine and decides on its own runs"
    )


def busy_profile_note(profile: HardwareProfile, name: str | None) -> str | None:
    """A note when a measured profile's own points say its machine was busy while probed
    (`kttune.hw.point_quality.busy`, read from the curves, so it holds for profiles written before
    the probe said so), or None."""
    from kttune.hw.point_quality import BUSY_SHARE, busy_counts

    counts = busy_counts(profile.curves) if profile.provenance.kind == "measured" else None
    if counts is None:
        return None
    named, total = counts
    return (
        f"profile {name or 'of this machine'!r} was measured on a busy machine: {named} of its {total} readings "
        f"(each point as each probe timed it) read as disturbed, more than {BUSY_SHARE:.0%}; on the GPU boxes the "
        "cost model read the path runner about twice as far off from such probes as from quiet ones "
        "(docs/probe.md#a-busy-machine); probe again when the machine is quiet (`kttune probe --quick --fresh`)"
    )


def resolve_inputs(
    model: str,
    vram_bytes: int,
    gpus: int = 1,
    profile: str | None = None,
    workload: str = "rag",
    method: str | None = None,
    host_ram_bytes: int | None = None,
    vram_margin: float = DEFAULT_VRAM_MARGIN,
    model_path: str | None = None,
    weight_path: str | None = None,
    chunks: tuple[int, ...] = (),
    attention_backend: str | None = None,
) -> Inputs:
    """The request for `model` (catalog name, HF repo id or directory) under `vram_bytes` per GPU on
    `gpus` GPUs, on `profile` (a file or shipped name; None: this machine's probe, else the shipped
    default) and `workload` (a preset, a JSON file or a trace); `host_ram_bytes` None: the
    profile's. `chunks`: chunk sizes to search instead of the defaults; `attention_backend`: the
    backend to pin instead of searching it (docs/cost-model.md#mla-prefill-forms)."""
    from kttune.hw.registry import default_shipped_name, resolve_named_profile

    bounds.GPUS.check(gpus, "gpus")
    bounds.VRAM_MARGIN.check(vram_margin, "vram_margin")
    check_vram_bytes(vram_bytes)
    spec = load_model(model, method)
    meth = get_method(method or spec.default_method).name
    here = this_machine_inventory()
    prof, prof_name = resolve_named_profile(profile, here)
    raw_wl = load_workload(workload)
    wl = raw_wl.clipped(spec.max_position_embeddings)
    ram = host_ram_bytes if host_ram_bytes is not None else prof.inventory.cpu.ram_total_bytes
    if not ram:
        raise UserError(
            "the profile does not say how much host RAM the machine has",
            "pass {host_ram_bytes}, e.g. {host_ram_bytes} 512G",
            params=("host_ram_bytes",),
        )
    check_host_ram_bytes(ram)
    notes = tuple(spec.notes) + tuple(
        n
        for n in (
            raw_wl.clip_note(spec.max_position_embeddings),
            measured_elsewhere_note(prof, prof_name, here, model),
            busy_profile_note(prof, prof_name),
        )
        if n
    )
    source = (
        HostRamSource("given")
        if host_ram_bytes is not None
        else HostRamSource("probe", default_shipped_name())
        if prof_name is None
        else HostRamSource("profile", prof_name)
    )
    budget = Budget(vram_bytes_per_gpu=vram_bytes, host_ram_bytes=ram, vram_margin=vram_margin, host_ram_source=source)
    req = SearchRequest(
        model=spec,
        method=meth,
        profile=prof,
        workload=wl,
        budget=budget,
        tp=gpus,
        chunks=check_chunks(chunks) if chunks else (),
        attention_backend=check_attention_backend(attention_backend) if attention_backend else "",
    )
    return Inputs(req, default_paths(spec, meth, model_path, weight_path or None), notes)
