"""`kttune simulate`: its arguments resolved into SimulationInputs (model, profile, flags, the
request stream, SLO), then the simulation (kttune.sim). One-line UserErrors naming the parameter
for bad values.

The workload is any of the shared namespace (kttune.search.workload.load_workload: presets, JSON
files, traces). `--from-search RESULT.json` (a `kttune search --json` document, or an `explain --json` one)
supplies what the search used and picked (or the explanation evaluated): the model, method and profile (found by fingerprint among the shipped
profiles and this machine's probe), the pick's flags, the workload and, when the search had an SLO,
its rate, limits, request count and seed; every option given explicitly overrides it.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields, replace
from pathlib import Path

from kttune.app.inputs import components_at
from kttune.app.names import DEFAULT_WORKLOAD
from kttune.config import LaunchConfig
from kttune.cost.components import Components
from kttune.cost.prefill import prefill_time_ms
from kttune.errors import ParameterError, UserError
from kttune.hw.registry import load_shipped, resolve_profile, shipped_names
from kttune.search.user_flags import check_gpu_experts, check_threshold, cpuinfer_threads
from kttune.search.workload import Workload, load_workload, preset_names, simulation_statistics, workload_from_dict
from kttune.sim import engine
from kttune.sim.costs import IterationCosts
from kttune.sim.metrics import Slo
from kttune.sim.simulate import SimulationInputs, SimulationReport, paper_rule_tbt_slo_ms, simulate as run_simulation
from kttune.sim.workload import LengthsStream, MixStream, TraceStream
from kttune.spec.loader import load_model
from kttune.spec.methods import get_method

DEFAULTS = {"gpus": 1, "gpu_experts": 0, "chunk": 8192, "max_total_tokens": 262144, "requests": 1000, "seed": 0}
DEFAULT_TTFT_SLO_S = 10.0
THIS_MACHINE = object()  # simulation_inputs: inventory this machine for its cached probe


# ---- a search result as input ----------------------------------------------------------------------
def read_search_result(path: str) -> dict:
    """A `kttune search --json` document, checked for what simulate takes from it."""
    p = Path(path)
    origin = f"search result {path!r}"
    fix = "pass the file `kttune search ... --json > result.json` wrote"
    if not p.is_file():
        raise UserError(f"{origin} does not exist", fix)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {origin} ({getattr(e, 'strerror', None) or e})", fix) from None
    except json.JSONDecodeError as e:
        raise UserError(f"{origin} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", fix) from None
    except (ValueError, RecursionError) as e:
        raise UserError(f"{origin} is not a JSON document kttune can read ({type(e).__name__})", fix) from None
    flags = search_flags(doc)
    if (
        not isinstance(flags, dict)
        or not isinstance(doc.get("model"), dict)
        or not isinstance(doc.get("workload"), dict)
    ):
        raise UserError(
            f"{origin} is not a `kttune search --json` or `explain --json` result (it has no pick.flags or "
            "evaluation.flags, model and workload)",
            fix,
        )
    known = {f.name for f in fields(LaunchConfig)}
    words = {f.name for f in fields(LaunchConfig) if f.type in ("str", str)}  # --kt-method, --attention-backend
    bad = [k for k in flags if k not in known]
    if bad:
        raise UserError(f"{origin}: pick.flags has an unknown flag {bad[0]!r}", fix)
    for k, v in flags.items():
        whole = lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0  # noqa: E731
        ok = (
            isinstance(v, str)
            if k in words
            else isinstance(v, list) and all(map(whole, v))
            if k == "numa_nodes"
            else whole(v)
        )
        if not ok:
            raise UserError(f"{origin}: pick.flags.{k} is {json.dumps(v)[:40]}", fix)
    target = (doc.get("slo") or {}).get("target") if isinstance(doc.get("slo"), dict) else None
    checks = {
        "rate_per_s": lambda v: _real(v) and v > 0,
        "ttft_s": lambda v: v is None or _real(v) and v > 0,
        "tbt_ms": lambda v: v is None or _real(v) and v > 0,
        "requests": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
        "seed": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    }
    for k, ok in checks.items():
        if isinstance(target, dict) and k in target and not ok(target[k]):
            raise UserError(f"{origin}: slo.target.{k} is {json.dumps(target[k])[:40]}", fix)
    for k in ("name", "source", "method"):
        v = doc["model"].get(k)
        if v is not None and not isinstance(v, str):
            raise UserError(f"{origin}: model.{k} is {json.dumps(v)[:40]}, not a string", fix)
    return doc


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def search_flags(doc) -> dict | None:
    """The flags a search picked (pick.flags) or an explanation evaluated (evaluation.flags)."""
    if not isinstance(doc, dict):
        return None
    for key in ("pick", "evaluation"):
        if isinstance(doc.get(key), dict) and isinstance(doc[key].get("flags"), dict):
            return doc[key]["flags"]
    return None


def _search_model(doc: dict, origin: str) -> str:
    m = doc["model"]
    src, name = m.get("source"), m.get("name")
    if isinstance(src, str) and not src.startswith("catalog:"):
        if Path(src).exists():
            return src
        raise UserError(f"{origin}: the model {src!r} the search read is not here", "pass {model}", params=("model",))
    if not isinstance(name, str):
        raise UserError(f"{origin}: model.name is missing", "pass {model}", params=("model",))
    return name


def _search_profile(doc: dict, origin: str, this_machine):
    """The profile the search used: this machine's default or a shipped one with its fingerprint."""
    want = doc.get("profile", {}).get("fingerprint") if isinstance(doc.get("profile"), dict) else None
    default = resolve_profile(None, this_machine)
    if not want or default.fingerprint == want:
        return default
    for n in shipped_names():
        p = load_shipped(n)
        if p.fingerprint == want:
            return p
    machine = doc["profile"].get("machine", "?")
    raise UserError(
        f"{origin}: the search used profile {machine} (fingerprint {want}), which is not shipped or this machine's",
        "pass it with {profile} FILE",
        params=("profile",),
    )


def _search_workload(doc: dict, origin: str) -> Workload:
    """The search's workload: the preset of that name when its lengths are the ones in the result
    (keeping a log-normal preset's distributions), else the lengths the result holds."""
    w = doc["workload"]
    name = w.get("name")
    if isinstance(name, str) and name in preset_names():
        preset = load_workload(name)
        if list(preset.prompt_tokens) == w.get("prompt_tokens") and list(preset.weights) == w.get("weights"):
            return preset
    body = {k: w[k] for k in ("prompt_tokens", "weights", "output_tokens", "concurrency", "decode_weight") if k in w}
    wl = workload_from_dict(body, name if isinstance(name, str) else "search", f"{origin}: its workload")
    return replace(wl, source="search")


# ---- resolution ------------------------------------------------------------------------------------
def default_rate(comp: Components, cfg: LaunchConfig, costs: IterationCosts, stats: dict) -> float:
    """Half the arrival rate an idle server sustains, to two significant digits: the lower of
    prefill alone (one mean prompt at a time, 1 / prefill) and decode (c requests at once, each
    taking its prefill and its mean output at one decode step of c requests: c / (prefill + output
    x step)), c the running-request limit or as many mean requests as the KV pool holds."""
    prompt, out = int(stats["prompt_tokens"]["mean"]), float(stats["output_tokens"]["mean"])
    pre_s = prefill_time_ms(comp, cfg, max(1, prompt)) / 1e3
    c = max(1, min(cfg.max_running_requests, int(cfg.max_total_tokens // max(1.0, prompt + out))))
    step_s = costs.decode(c, c * (prompt + out / 2)).ms / 1e3
    return float(f"{0.5 * min(1 / pre_s, c / (pre_s + out * step_s)):.2g}")


def _positive(name: str, v) -> None:
    if isinstance(v, float) and not math.isfinite(v) or v <= 0:
        raise ParameterError(name, f"{v} must be positive", "pass a positive count")


def simulation_inputs(
    model: str | None = None,
    profile: str | None = None,
    method: str | None = None,
    workload: str | None = None,
    rate: float | None = None,
    requests: int | None = None,
    seed: int | None = None,
    gpu_experts: int | None = None,
    chunk: int | None = None,
    threshold: int | None = None,
    max_total_tokens: int | None = None,
    max_running_requests: int | None = None,
    cpuinfer: int | None = None,
    gpus: int | None = None,
    schedules: tuple[str, ...] | None = None,
    groups: int | None = None,
    large_chunk: int = 8192,
    ttft_slo_s: float | None = None,
    tbt_slo_ms: float | None = None,
    router_skew: float = 0.0,
    this_machine=THIS_MACHINE,
    from_search: str | None = None,
) -> SimulationInputs:
    """The simulation's inputs. `this_machine`: the Inventory whose cached probe is the default
    profile (THIS_MACHINE: this machine's, taken when no profile is given; None: none, the shipped
    default). Options left None come from `from_search` (a search result's path) when given, else
    DEFAULTS."""
    if this_machine is THIS_MACHINE:
        from kttune.app.inputs import this_machine_inventory

        this_machine = None if profile else this_machine_inventory()
    doc = read_search_result(from_search) if from_search else None
    origin = f"search result {from_search!r}"
    pick = dict(search_flags(doc)) if doc else {}
    target = (doc.get("slo") or {}).get("target") if doc else None
    target = target if isinstance(target, dict) else {}
    if model is None:
        if doc is None:
            raise UserError(
                "no model to simulate", "pass {model} (or {from_search} RESULT.json)", params=("model", "from_search")
            )
        model = _search_model(doc, origin)
    if method is None and doc:
        method = doc["model"].get("method") or pick.get("method")

    def opt(v, key: str, default):
        return v if v is not None else pick[key] if key in pick else default

    gpus = opt(gpus, "tp", DEFAULTS["gpus"])
    gpu_experts = opt(gpu_experts, "num_gpu_experts", DEFAULTS["gpu_experts"])
    chunk = opt(chunk, "chunked_prefill_size", DEFAULTS["chunk"])
    max_total_tokens = opt(max_total_tokens, "max_total_tokens", DEFAULTS["max_total_tokens"])
    cpuinfer = opt(cpuinfer, "cpuinfer_threads", None)
    threshold = opt(threshold, "gpu_prefill_token_threshold", None)
    rate = rate if rate is not None else target.get("rate_per_s")
    requests = requests if requests is not None else target.get("requests", DEFAULTS["requests"])
    seed = seed if seed is not None else target.get("seed", DEFAULTS["seed"])
    if ttft_slo_s is None and target.get("ttft_s") is not None:
        ttft_slo_s = target["ttft_s"]
    if tbt_slo_ms is None and target.get("tbt_ms") is not None:
        tbt_slo_ms = target["tbt_ms"]

    for name, v in (
        ("chunk", chunk),
        ("max_total_tokens", max_total_tokens),
        ("large_chunk", large_chunk),
        ("gpus", gpus),
        ("requests", requests),
    ):
        _positive(name, v)
    if max_running_requests is not None:
        _positive("max_running_requests", max_running_requests)
    if groups is not None and groups < 1:
        raise ParameterError(
            "groups", f"{groups} must be at least 1", "pass a group count, or leave it out for the paper's rule"
        )
    if not (math.isfinite(router_skew) and router_skew >= 0):
        raise ParameterError(
            "router_skew",
            f"{router_skew} is not a finite non-negative number",
            "use 0 (uniform routing) or a Zipf exponent such as 1.0",
        )
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ParameterError("rate", f"{rate} must be a positive number of requests per second", "pass e.g. {rate} 0.5")
    schedules = engine.SCHEDULES if schedules is None else schedules  # None: every schedule, side by side
    bad = [s for s in schedules if s not in engine.SCHEDULES]
    if bad or not schedules:
        raise UserError(f"unknown schedule {', '.join(bad) or '(none)'}", f"use any of {', '.join(engine.SCHEDULES)}")

    spec = load_model(model, method)
    meth = get_method(method or spec.default_method)
    prof = (
        resolve_profile(profile, this_machine) if profile or doc is None else _search_profile(doc, origin, this_machine)
    )
    if workload is not None:
        raw = load_workload(workload)
    elif doc is not None:
        raw = _search_workload(doc, origin)
    else:
        raw = load_workload(DEFAULT_WORKLOAD)
    wl = raw.clipped(spec.max_position_embeddings)
    max_running = (
        max_running_requests if max_running_requests is not None else pick.get("max_running_requests", wl.concurrency)
    )
    comp = components_at(prof, spec, meth.name, gpus, cpuinfer)  # a count between two measured: interpolated
    th = cpuinfer_threads(comp.cpu_thread_options(), prof.inventory.cpu.physical_cores or 10**9, cpuinfer)
    if gpu_experts < 0:
        raise ParameterError("gpu_experts", f"{gpu_experts} is negative", f"pass 0..{spec.num_experts}")
    check_gpu_experts(spec, gpu_experts)
    thr = threshold if threshold is not None else (min(4096, chunk) if meth.layerwise else 0)
    if thr < 0:
        raise ParameterError("threshold", f"{thr} is negative", "pass 0 (layerwise off) or a token count")
    check_threshold(meth, thr)
    cfg = LaunchConfig(
        method=meth.name,
        tp=gpus,
        num_gpu_experts=gpu_experts,
        chunked_prefill_size=chunk,
        gpu_prefill_token_threshold=thr,
        max_total_tokens=max_total_tokens,
        cpuinfer_threads=th,
        threadpool_count=pick.get("threadpool_count", max(1, len(prof.inventory.cpu.numa_nodes))),
        numa_nodes=tuple(pick.get("numa_nodes", ())),
        max_running_requests=max_running,
        cuda_graph_max_bs=pick.get("cuda_graph_max_bs", max_running),
    )
    stats = simulation_statistics(wl)
    source = "trace" if wl.form == "trace" else wl.source
    if wl.form == "trace":
        stream = TraceStream(wl.trace, rate)
        if rate is not None:
            stats = {**stats, "mean_rate_per_s": rate}
        wl_dict = {
            "name": workload,
            "source": source,
            "form": wl.form,
            "statistics": stats,
            "rate_per_s": rate,
            "requests": wl.trace.rows,
            "seed": None,
        }
    else:
        if rate is None:
            rate = default_rate(comp, cfg, IterationCosts(comp, cfg, router_skew), stats)
        if wl.mix is not None:
            stream = MixStream(wl.mix, rate, requests, seed)
        else:
            stream = LengthsStream(wl.prompt_tokens, wl.weights, wl.output_tokens, rate, requests, seed)
        wl_dict = {
            "name": wl.name,
            "source": source,
            "form": wl.form,
            "description": wl.description,
            "statistics": stats,
            "rate_per_s": rate,
            "requests": requests,
            "seed": seed,
        }
        if wl.mix is not None:
            wl_dict["mix"] = wl.mix.to_dict()
        else:
            wl_dict["lengths"] = {
                "prompt_tokens": list(wl.prompt_tokens),
                "weights": list(wl.weights),
                "output_tokens": wl.output_tokens,
            }
    costs = IterationCosts(comp, cfg, router_skew)
    tbt = tbt_slo_ms if tbt_slo_ms is not None else wl.tbt_slo_ms
    ttft = (
        ttft_slo_s
        if ttft_slo_s is not None
        else (wl.ttft_slo_ms / 1e3 if wl.ttft_slo_ms is not None else DEFAULT_TTFT_SLO_S)
    )
    slo = Slo(ttft_s=ttft, tbt_ms=tbt if tbt is not None else paper_rule_tbt_slo_ms(costs))
    if not (slo.ttft_s > 0 and slo.tbt_ms > 0):
        raise UserError(
            "SLO limits must be positive",
            "pass e.g. {ttft_slo_s} 10s {tbt_slo_ms} 150ms",
            params=("ttft_slo_s", "tbt_slo_ms"),
        )
    scheds = tuple(engine.Schedule(s, groups=groups, large_chunk=large_chunk) for s in dict.fromkeys(schedules))
    if not meth.layerwise:
        comp.notes.append(
            f"{meth.name} has no layerwise path: chunked runs hybrid only, and layered splits hybrid prefill over groups"
        )
    note = raw.clip_note(spec.max_position_embeddings)
    if note and wl.form == "lengths":
        comp.notes.append(note)
    if doc is not None:
        comp.notes.append(f"flags, workload and SLO from {from_search} (options given override them)")
    return SimulationInputs(comp, cfg, stream, wl_dict, slo, scheds, router_skew, prof.provenance.machine)


def simulate(
    inputs: SimulationInputs, with_capacity: bool = False, samples: bool = False, on_progress=None
) -> SimulationReport:
    """`kttune simulate`: the simulation of `inputs` (`simulation_inputs`) under each schedule;
    `with_capacity`: also each schedule's highest rate meeting the SLO; `samples`: per-request
    TTFT and longest gap in the report."""
    return run_simulation(inputs, with_capacity=with_capacity, samples=samples, on_progress=on_progress)
