"""Every number kttune accepts, bounded and checked once, at the edge.

A `Bound` is a named rule: finite, whole or real, a lower and an upper bound. The upper bounds
keep time and memory finite (a typo such as `--repeats 99999999999999999999` is refused, not
repeated until killed) and sit above anything a real machine or model has. The command-line
options (kttune.cli.bounds maps a rule to an option and states its range in `--help`) and the
file inputs (config.json, hardware profiles, path-runner results) check their numbers here.

A value outside its rule raises `InvalidValue`, a UserError (exit 2) that carries the parameter's
name as the caller knows it (`gpus`, `hidden_size`): the CLI names the flag (`--gpus`), a file
reader the file and key. No typer: the core and the CLI share it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable

from kttune.errors import UserError

GIB = 1024**3
TIB = 1024**4


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value) if isinstance(value, (list, dict, bool)) else str(value)
    text = " ".join(str(text).split())
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:] + f" ({len(text)} characters)"


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


class InvalidValue(UserError):
    """A value its `Bound` refuses. `param` names the value as the caller knows it; `where`, when
    given, is the file holding it (then the message reads `<where>: <param> = <value> ...`).
    `renamed(flag)` gives the same error under another name (the CLI's spelling of a parameter)."""

    def __init__(
        self, param: str, value: Any, rule: "Bound", reason: str, where: str = "", fix: str | None = None
    ) -> None:
        self.param, self.value, self.rule, self.reason, self.where = param, value, rule, reason, where
        subject = f"{where}: {param} = {_show(value)}" if where else f"{param} {_show(value)}"
        super().__init__(f"{subject} {reason}", fix or rule.fix(param))

    def renamed(self, param: str) -> "InvalidValue":
        return InvalidValue(
            param,
            self.value,
            self.rule,
            self.reason,
            self.where,
            None if self.fix == self.rule.fix(self.param) else self.fix,
        )

    def named(self, spell: Callable[[str], str]) -> "InvalidValue":
        """kttune.errors.UserError.named: the parameter spelled `spell(param)`; a value read from a
        file (`where`) keeps the file's key."""
        return self if self.where else self.renamed(spell(self.param))


@dataclass(frozen=True)
class Bound:
    """One rule: `lo <= value <= hi` (strict where `lo_open` / `hi_open`), finite, and whole where
    `integer`. `why` says where the upper bound comes from; `example` is a value to suggest."""

    lo: float
    hi: float
    integer: bool = True
    lo_open: bool = False
    hi_open: bool = False
    unit: str = ""
    example: str = ""
    why: str = ""

    def describe(self) -> str:
        """The range as `--help` and the messages state it: `1..64`, `> 0 and <= 86400 s`."""
        unit = f" {self.unit}" if self.unit else ""
        if self.integer:
            return f"{int(self.lo):,}..{int(self.hi):,}{unit}"
        lo = f"{'>' if self.lo_open else '>='} {_num(self.lo)}"
        return f"{lo} and {'<' if self.hi_open else '<='} {_num(self.hi)}{unit}"

    def fix(self, param: str) -> str:
        if self.example and param.startswith("-"):
            return f"pass e.g. {param} {self.example}"
        return f"pass a value {'in ' if self.integer else ''}{self.describe()}"

    def check(self, value: Any, param: str, where: str = "", fix: str | None = None) -> Any:
        """`value` if the rule holds (an integral float becomes an int where `integer`), else
        InvalidValue. Booleans, strings and containers are not numbers."""

        def bad(reason: str) -> InvalidValue:
            return InvalidValue(param, value, self, reason, where, fix)

        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("is not a number")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise bad("is not a finite number")
            if self.integer:
                if not value.is_integer():
                    raise bad("is not a whole number")
                value = int(value)
        too_low = value <= self.lo if self.lo_open else value < self.lo
        too_high = value >= self.hi if self.hi_open else value > self.hi
        if too_low or too_high:
            why = f" ({self.why})" if too_high and self.why else ""
            raise bad(f"is outside {self.describe()}{why}" if self.integer else f"must be {self.describe()}{why}")
        return value


# ---- the rules ---------------------------------------------------------------------------------
# Machines: what one server has. The largest GPUs hold 288 GB (B300, MI355X); the largest single
# servers 32 TiB of RAM and a few hundred cores.
GPUS = Bound(1, 64, example="2", why="the GPUs of one server")
VRAM_BYTES_PER_GPU = Bound(0, 512 * GIB, lo_open=True, unit="bytes", why="the largest GPUs hold 288 GB")
HOST_RAM_BYTES = Bound(0, 64 * TIB, lo_open=True, unit="bytes", why="the largest servers hold 32 TiB")
HOST_RAM_GIB = Bound(
    0, 64 * 1024, integer=False, lo_open=True, unit="GiB", example="512", why="the largest servers hold 32 TiB"
)
CPU_CORES = Bound(1, 4096, example="32", why="more cores than any server has")
NUMA_NODES = Bound(1, 64, example="2", why="more NUMA nodes than any server has")
MEM_CHANNELS = Bound(1, 128, example="8", why="more DDR channels than any server has")
MEM_MTS = Bound(400, 20000, unit="MT/s", example="4800", why="faster than any DDR generation")
THREADS = Bound(1, 4096, example="15", why="more threads than any server has")
THREADS_OR_DEFAULT = Bound(0, 4096, example="15", why="more threads than any server has")  # 0: the default
BANDWIDTH_GBPS = Bound(0, 1e5, integer=False, lo_open=True, unit="GB/s", why="faster than any memory")
PORT = Bound(1, 65535, example="30000", why="the largest TCP port")

# Tokens. A forward (chunk) or a prompt of a million tokens is past every model's context; a KV
# pool of 64 Mi tokens past every GPU's memory.
FORWARD_TOKENS = Bound(1, 1 << 20, unit="tokens", example="8192", why="past every model's context length")
THRESHOLD_TOKENS = Bound(0, 1 << 20, unit="tokens", example="4096", why="past every model's context length")
KV_TOKENS = Bound(1, 1 << 26, unit="tokens", example="65536", why="more KV than any GPU holds")
GPU_EXPERTS = Bound(0, 1 << 16, example="8", why="more experts than any model has")
RUNNING_REQUESTS = Bound(1, 1 << 16, example="32", why="more than any server runs at once")
LAYER_COUNT = Bound(1, 1 << 12, example="2", why="more layers than any model has")

# Work: counts and times that bound how long a command runs.
SEED = Bound(0, 2**32 - 1, example="3", why="seeds are 32-bit")
TRIALS = Bound(1, 10**6, example="300", why="a million trials is hours of search")
REQUESTS = Bound(1, 10**7, example="1000", why="ten million simulated requests")
REPEATS = Bound(1, 100, example="3", why="a hundred repeats of every run")
PROBE_REPEATS = Bound(1, 20, example="3", why="twenty full probes are hours")
CANDIDATES = Bound(1, 64, example="4", why="more configurations than a measured race can tell apart")
RATE_PER_S = Bound(
    0, 1e6, integer=False, lo_open=True, unit="requests/s", example="1.5", why="a million requests a second"
)
ROUTER_SKEW = Bound(0, 10, integer=False, example="1.0", why="past 10 every token goes to the most popular experts")
VRAM_MARGIN = Bound(0, 0.5, integer=False, hi_open=True, example="0.05")
RUN_SECONDS = Bound(0, 86400, integer=False, lo_open=True, unit="s", example="60", why="a day")
TIMEOUT_SECONDS = Bound(0, 86400, integer=False, lo_open=True, unit="s", example="600", why="a day")
DURATION_SECONDS = Bound(0, 30 * 86400, integer=False, lo_open=True, unit="s", why="thirty days")

# Profiles: a path-runner or server correction exp(a + b ln M) of the cost model's time. Loose (a
# stand-in server writes factors near e^-11), tight enough that no forward size overflows it.
CALIBRATION_A = Bound(-100, 100, integer=False, why="a factor past e^100")
CALIBRATION_B = Bound(-10, 10, integer=False, why="a factor growing past the tenth power of the forward size")

# config.json: architecture sizes (hidden size, widths, head counts, ranks) and counts that may be 0.
CONFIG_SIZE = Bound(1, 1 << 24, why="larger than any real model's")
CONFIG_COUNT = Bound(0, 1 << 24, why="larger than any real model's")


# ---- JSON text ------------------------------------------------------------------------------------
# A JSON input larger than this, or nested deeper, or with a number longer than this, is no
# document kttune wrote: refused before it costs memory or recursion.
MAX_JSON_BYTES = 256 * 1024**2
MAX_JSON_DEPTH = 64
MAX_NUMBER_DIGITS = 40


class _Refused(ValueError):
    pass


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _Refused(f"a number of {len(text.lstrip('-')):,} digits")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > 2 * MAX_NUMBER_DIGITS:
        raise _Refused(f"a number written with {len(text):,} characters")
    v = float(text)
    if not math.isfinite(v):
        raise _Refused(f"the number {text[:20]}, which is not finite")
    return v


def _parse_constant(name: str) -> float:
    raise _Refused(f"{name}, which is not a finite number (JSON has no NaN or Infinity)")


def _nan_as_null(name: str) -> None:
    if name != "NaN":
        _parse_constant(name)
    return None


def _nonfinite_as_null(name: str) -> None:
    return None


def _depth(doc: Any) -> int:
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, d)
            if deepest > MAX_JSON_DEPTH:
                return deepest
            stack.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def loads_json(
    text: str | bytes,
    origin: str,
    fix: str,
    nan_as_null: bool = False,
    params: tuple[str, ...] = (),
    nonfinite_as_null: bool = False,
) -> Any:
    """Parse JSON text from a file the user named: NaN, Infinity, numbers of more than 40 digits,
    nesting deeper than 64 and documents over 256 MiB are refused; every failure is one UserError
    `<origin> ...; <fix>` (`params`: the parameters `fix` names, kttune.errors). `nan_as_null`: a NaN reads as null (hardware profiles, where kttune
    releases wrote NaN for a diagnostic not measured; the numbers the models use are checked where
    they are read, and null is no number). `nonfinite_as_null`: NaN, Infinity and -Infinity read as
    null (HF config.json files, which transformers writes with Python's json: Nemotron-H's
    `time_step_limit` holds Infinity)."""
    if len(text) > MAX_JSON_BYTES:
        raise UserError(
            f"{origin} is {len(text) / 1024**2:,.0f} MiB, larger than any document kttune reads "
            f"({MAX_JSON_BYTES // 1024**2} MiB)",
            fix,
            params=params,
        )
    try:
        doc = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_nonfinite_as_null
            if nonfinite_as_null
            else _nan_as_null
            if nan_as_null
            else _parse_constant,
        )
    except _Refused as e:
        raise UserError(f"{origin} holds {e}", fix, params=params) from None
    except json.JSONDecodeError as e:
        raise UserError(
            f"{origin} is not valid JSON (line {e.lineno} column {e.colno}: {e.msg})", fix, params=params
        ) from None
    except RecursionError:
        raise UserError(
            f"{origin} is nested deeper than any document kttune reads ({MAX_JSON_DEPTH} levels)", fix, params=params
        ) from None
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{origin} is not JSON text ({type(e).__name__})", fix, params=params) from None
    if _depth(doc) > MAX_JSON_DEPTH:
        raise UserError(
            f"{origin} is nested deeper than any document kttune reads ({MAX_JSON_DEPTH} levels)", fix, params=params
        )
    return doc


def finite_or_null(obj: Any) -> Any:
    """`obj` with every NaN and infinity replaced by None (null): what kttune writes is standard
    JSON, which `loads_json` reads back."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    return obj


def read_json_file(
    path: str | os.PathLike,
    origin: str,
    fix: str,
    nan_as_null: bool = False,
    params: tuple[str, ...] = (),
    nonfinite_as_null: bool = False,
) -> Any:
    """`loads_json` of a file; a file too large is refused before it is read, an unreadable one
    is one UserError naming the reason."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_JSON_BYTES:
                raise UserError(
                    f"{origin} is {size / 1024**2:,.0f} MiB, larger than any document kttune reads "
                    f"({MAX_JSON_BYTES // 1024**2} MiB)",
                    fix,
                    params=params,
                )
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as e:
        raise UserError(f"cannot read {origin} ({e.strerror or e})", fix, params=params) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"{origin} is not UTF-8 text", fix, params=params) from None
    return loads_json(text, origin, fix, nan_as_null, params, nonfinite_as_null)
