"""What `kttune tune` answers: typed request and result (bytes and seconds, not "32G" and "3m"),
each with `to_dict()` for the JSON report."""

from __future__ import annotations

from dataclasses import dataclass, field

from kttune.config import LaunchConfig
from kttune.memory.vram import DEFAULT_VRAM_MARGIN
from kttune.protocol import Comparison, Estimate
from kttune.schema import schema

EVALUATORS = ("auto", "runner", "runner-cpu", "model")
PROBE_MODES = ("auto", "always", "never")


@dataclass(frozen=True)
class TuneRequest:
    """One `kttune tune`: the model to serve, the VRAM per GPU and the GPUs, the workload, and how
    much measuring to do. `evaluator` "auto": the path runner on this machine's GPU, or the cost
    model where there is no GPU; "runner-cpu": the runner's CPU variant (small shapes: a check of
    the whole flow, not advice)."""

    model: str  # catalog name or model directory
    vram_bytes: int  # per GPU
    gpus: int = 1
    workload: str = "rag"  # preset name or JSON file
    method: str | None = None
    host_ram_bytes: int | None = None
    profile: str | None = None  # None: this machine's probe where it holds, else the shipped default
    evaluator: str = "auto"
    budget_s: float | None = None  # wall-clock budget of this run (None: the default plan)
    layers: int = 2  # K decoder layers the runner builds
    repeats: int = 3  # rounds before a race decides (its minimum)
    max_rounds: int = 5
    lengths: int = 3  # measured representative prompt lengths of the workload
    candidates: int = 4  # the model's fastest configurations measured besides its pick
    finalists: int = 3  # screened candidates that go on to the race (with the baselines)
    probe: str = "auto"  # auto | always | never
    chunks: tuple[int, ...] = ()  # chunk choices (default: the search's)
    state_path: str | None = None  # resume file (default: in the cache dir, keyed by the request)
    fresh: bool = False  # ignore a saved state
    out_dir: str | None = None  # report folder (default: in the cache dir)
    seed: int = 0
    model_path: str | None = None
    weight_path: str | None = None
    vram_margin: float = DEFAULT_VRAM_MARGIN
    tie_tolerance: float = 0.03


@dataclass(frozen=True)
class TuneEvent:
    """Progress: `done` of `total` timed samples planned (the total moves as the plan does)."""

    phase: str
    done: int
    total: int
    message: str = ""


@dataclass(frozen=True)
class VerifyRow:
    """One configuration of the verification: the pick, a runner-up, a baseline or a candidate."""

    name: str
    role: str  # pick | runner-up | baseline | candidate
    cfg: LaunchConfig
    fits: bool
    predicted_tok_s: float | None
    estimate: Estimate | None  # measured tok/s (median, interval, outliers)
    vs_pick: Comparison | None  # this / the pick, paired by round
    status: str  # the race's (winner, tied, eliminated, survived, screened out, unmeasurable, not measured)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "role": self.role,
            "config": self.cfg.to_dict(),
            "fits": self.fits,
            "predicted_tok_s": self.predicted_tok_s,
            "measured_tok_s": self.estimate.to_dict() if self.estimate else None,
            "vs_pick": self.vs_pick.to_dict() if self.vs_pick else None,
            "status": self.status,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Gain:
    """The pick over a baseline: pick / baseline tok/s with its interval (paired by round)."""

    baseline: str
    ratio: float
    low: float
    high: float

    def to_dict(self) -> dict:
        return {"baseline": self.baseline, "ratio": self.ratio, "low": self.low, "high": self.high}

    def short(self) -> str:
        return f"{self.ratio:.2f}x [{self.low:.2f}-{self.high:.2f}]"


@dataclass
class TuneResult:
    mode: str  # "measured" (the runner) or "model" (no GPU: the cost model alone)
    model: str
    method: str
    evaluator: str
    profile: str  # what the model rests on
    pick: LaunchConfig
    argv: tuple[str, ...]
    decision: str
    lengths: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()
    rows: tuple[VerifyRow, ...] = ()
    gains: tuple[Gain, ...] = ()
    pick_estimate: Estimate | None = None
    predicted_tok_s: float | None = None
    crossover: dict = field(default_factory=dict)
    calibration: list = field(default_factory=list)
    check: dict = field(default_factory=dict)
    probe: dict = field(default_factory=dict)
    phases_s: dict = field(default_factory=dict)
    protocol: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    wall_s: float = 0.0
    resumed: bool = False
    state_path: str = ""
    report_dir: str = ""
    notes: tuple[str, ...] = ()
    stopped: str = ""  # why the plan was cut short (the budget), or ""
    # for callers that measure more (benchmarks), never serialised: the runner session when asked to
    # keep it (run_tune(keep_runner=True)), the search space, the calibrated cost model and request
    runner: object = None
    space: object = None
    components: object = None
    request: object = None
    report_files: tuple = ()  # what `kttune.app.tuning.tune` wrote (tune.json, tune.md)

    def to_dict(self) -> dict:
        return {
            "schema": schema("tune"),
            "mode": self.mode,
            "model": self.model,
            "method": self.method,
            "evaluator": self.evaluator,
            "profile": self.profile,
            "pick": self.pick.to_dict(),
            "command": list(self.argv),
            "decision": self.decision,
            "pick_measured_tok_s": self.pick_estimate.to_dict() if self.pick_estimate else None,
            "pick_predicted_tok_s": self.predicted_tok_s,
            "prompt_tokens": list(self.lengths),
            "weights": list(self.weights),
            "verification": [r.to_dict() for r in self.rows],
            "gains": [g.to_dict() for g in self.gains],
            "crossover": self.crossover,
            "calibration": self.calibration,
            "output_check": self.check,
            "probe": self.probe,
            "phases_s": self.phases_s,
            "protocol": self.protocol,
            "memory": self.memory,
            "wall_s": self.wall_s,
            "resumed": self.resumed,
            "state_path": self.state_path,
            "report_dir": self.report_dir,
            "notes": list(self.notes),
            "stopped": self.stopped,
        }
