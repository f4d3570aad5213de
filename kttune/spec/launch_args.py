"""The sglang-kt 0.7.2 launch flags kttune reads and writes, in one table, and the parser of a
user's `python -m sglang.launch_server ...` command (docs/sglang-kt.md#flags-and-their-meaning).

kttune.search.launch writes its command with the names in `FLAGS` (the first spelling of each), and
`parse_launch_command` reads every spelling sglang-kt accepts, so the two cannot drift. Flags
that change nothing kttune predicts are listed in `IGNORED` with a one-line note; anything else
is reported as unknown. Pure: text in, values and notes out.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from kttune.errors import UserError


@dataclass(frozen=True)
class LaunchFlag:
    """One flag kttune models. `names`: the spellings sglang-kt 0.7.2's argparse accepts, the one
    kttune emits first; `kind`: int, float or str (the value's type), or bool for a switch."""

    key: str
    names: tuple[str, ...]
    kind: type
    meaning: str


FLAGS: tuple[LaunchFlag, ...] = (
    LaunchFlag("model_path", ("--model", "--model-path"), str, "the model directory (config.json, GPU weights)"),
    LaunchFlag("weight_path", ("--kt-weight-path",), str, "the CPU expert weights; unset, KT is off"),
    LaunchFlag("method", ("--kt-method",), str, "the CPU expert format"),
    LaunchFlag("cpuinfer_threads", ("--kt-cpuinfer",), int, "kt-kernel worker threads"),
    LaunchFlag("threadpool_count", ("--kt-threadpool-count",), int, "kt-kernel thread pools (one per NUMA node)"),
    LaunchFlag("numa_nodes", ("--kt-numa-nodes",), list, "NUMA node of each thread pool (one id per pool)"),
    LaunchFlag("num_gpu_experts", ("--kt-num-gpu-experts",), int, "GPU-resident experts per MoE layer"),
    LaunchFlag("gpu_experts_ratio", ("--kt-gpu-experts-ratio",), float, "GPU-resident share of all experts"),
    LaunchFlag(
        "gpu_prefill_token_threshold",
        ("--kt-gpu-prefill-token-threshold",),
        int,
        "forwards of at least this many tokens take the layerwise path (0: off)",
    ),
    LaunchFlag("chunked_prefill_size", ("--chunked-prefill-size",), int, "tokens per prefill forward"),
    LaunchFlag("max_total_tokens", ("--max-total-tokens",), int, "KV pool cap in tokens"),
    LaunchFlag("max_running_requests", ("--max-running-requests",), int, "requests run at once, at most"),
    LaunchFlag("cuda_graph_max_bs", ("--cuda-graph-max-bs",), int, "largest decode batch captured as a CUDA graph"),
    LaunchFlag(
        "mem_fraction_static", ("--mem-fraction-static",), float, "share of free VRAM for weights and the KV pool"
    ),
    # argparse takes any unambiguous prefix, so `--tp` reads as `--tp-size` (kt run spells it so)
    LaunchFlag("tp", ("--tensor-parallel-size", "--tp-size", "--tp"), int, "GPUs (tensor parallel)"),
    LaunchFlag("context_length", ("--context-length",), int, "longest request (default: the model's)"),
    LaunchFlag("page_size", ("--page-size",), int, "KV page size in tokens"),
    LaunchFlag("kv_cache_dtype", ("--kv-cache-dtype",), str, "KV cache element type"),
    LaunchFlag(
        "linear_state_slots",
        ("--max-mamba-cache-size",),
        int,
        "request states the linear-attention layers keep (Qwen3-Next, Qwen3.5)",
    ),
    LaunchFlag(
        "mamba_full_memory_ratio",
        ("--mamba-full-memory-ratio",),
        float,
        "linear-attention states : KV pool, of the memory left after the weights (unset state slots)",
    ),
    LaunchFlag("disable_radix_cache", ("--disable-radix-cache",), bool, "no prefix reuse"),
    LaunchFlag(
        "attention_backend",
        ("--attention-backend",),
        str,
        "attention kernels: the MLA prefill form over a cached prefix, and whether sparse attention runs",
    ),
    # written by kttune, read for the round trip; no prediction depends on them
    LaunchFlag("port", ("--port",), int, "HTTP port"),
    LaunchFlag("watchdog_timeout", ("--watchdog-timeout",), float, "seconds a forward may take before SGLang aborts"),
    LaunchFlag("fp8_gemm_backend", ("--fp8-gemm-backend",), str, "dense FP8 GEMM kernels"),
    LaunchFlag("trust_remote_code", ("--trust-remote-code",), bool, "run the model repo's own code"),
    LaunchFlag(
        "disable_shared_experts_fusion",
        ("--disable-shared-experts-fusion",),
        bool,
        "keep shared experts apart from routed ones (sglang-kt forces it with KT)",
    ),
    LaunchFlag("enable_mixed_chunk", ("--enable-mixed-chunk",), bool, "decode tokens ride in prefill forwards"),
)

FLAG = {f.key: f for f in FLAGS}

# SGLang's --attention-backend choices (server_args.py ATTENTION_BACKEND_CHOICES, the fork's main):
# anything else and the server refuses to start.
SGLANG_ATTENTION_BACKENDS = (
    "triton",
    "torch_native",
    "flex_attention",
    "nsa",
    "compressed",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "flashmla",
    "trtllm_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
)


def check_attention_backend(name: str, flag: str = "--attention-backend") -> str:
    """`name` if SGLang takes it as an attention backend, else a UserError naming the choices."""
    if name not in SGLANG_ATTENTION_BACKENDS:
        raise UserError(
            f"{flag} {name!r} is not an attention backend SGLang takes",
            f"use one of {', '.join(SGLANG_ATTENTION_BACKENDS)} (kttune launches MLA models with triton or flashinfer)",
        )
    return name


_BY_NAME = {n: f for f in FLAGS for n in f.names}

# Read but not modelled: why each changes nothing kttune predicts (or what kttune assumes instead).
_NOT_MODELLED = {
    "port": "the HTTP port: no effect on the prediction",
    "watchdog_timeout": "how long a forward may take before SGLang aborts (kt run uses 3000 s: layerwise chunks are slow)",
    "fp8_gemm_backend": "the dense FP8 GEMM kernels: not modelled",
    "trust_remote_code": "runs the model repo's own code: no effect on the prediction",
    "disable_shared_experts_fusion": "sglang-kt sets it whenever --kt-weight-path is set",
    "enable_mixed_chunk": "decode tokens ride in prefill forwards and count toward the threshold; the prediction "
    "is an idle server's prefill (kttune simulate models the mix)",
}

# (spellings, takes a value, note) of sglang-kt flags kttune reads and leaves out of the prediction.
IGNORED: tuple[tuple[tuple[str, ...], bool, str], ...] = (
    (("--host",), True, "the listen address: no effect on the prediction"),
    (("--served-model-name",), True, "the name clients use: no effect on the prediction"),
    (("--api-key",), True, "client authentication: no effect on the prediction"),
    (("--log-level",), True, "logging: no effect on the prediction"),
    (("--tokenizer-path",), True, "the tokenizer: no effect on the prediction"),
    (("--dtype",), True, "the dense weights' dtype: kttune reads the checkpoint's"),
    (("--quantization",), True, "the GPU weights' quantization: kttune reads the checkpoint's quantization_config"),
    (
        ("--kt-max-deferred-experts-per-token",),
        True,
        "defers low-weight experts to overlap the next layer (decode); not modelled: the prediction is without deferral",
    ),
    (
        ("--kt-expert-placement-strategy",),
        True,
        "which experts sit on the GPU: modelled as uniform (experts 0..n-1 per layer)",
    ),
    (("--init-expert-location",), True, "expert frequencies for placement: modelled as uniform placement"),
    (
        ("--kt-enable-dynamic-expert-update",),
        False,
        "re-picks each layer's GPU experts after a layerwise forward; not modelled (the GPU-expert count stays)",
    ),
    (("--enable-p2p-check",), False, "checks GPU peer access at start: no effect on the prediction"),
    (
        ("--max-prefill-tokens",),
        True,
        "caps the prompt tokens added per prefill batch beyond one request's chunk: "
        "the prediction is one prompt at a time",
    ),
    (
        ("--schedule-conservativeness",),
        True,
        "how much output SGLang reserves at admission: kttune assumes the default",
    ),
    (
        ("--disable-cuda-graph",),
        False,
        "no decode CUDA graphs: kttune still counts their memory and models decode without graph-launch savings",
    ),
    (("--enable-metrics",), False, "Prometheus metrics: no effect on the prediction"),
    (("--random-seed",), True, "sampling seed: no effect on the prediction"),
    (("--moe-runner-backend",), True, "the GPU MoE kernels: the cost model uses the profile's measured GPU MoE"),
    (("--stream-interval",), True, "streaming granularity: no effect on the prediction"),
    (("--nccl-port", "--dist-init-addr"), True, "distributed set-up: no effect on the prediction"),
)
_IGNORED_BY_NAME = {n: (takes, note) for names, takes, note in IGNORED for n in names}

PROGRAMS = ("sglang.launch_server",)  # `python -m sglang.launch_server`


def flag_name(key: str) -> str:
    """The spelling kttune writes for a flag (its first name)."""
    return FLAG[key].names[0]


def names_of(key: str) -> tuple[str, ...]:
    return FLAG[key].names


@dataclass(frozen=True)
class ParsedLaunch:
    """What a launch command sets: `values` by `LaunchFlag.key` (absent: not given), the flags read
    but not modelled and the unknown ones, each with a note; the environment assignments before it."""

    values: Mapping[str, object]
    ignored: tuple[tuple[str, str], ...] = ()  # (flag as written, why it changes no prediction)
    unknown: tuple[str, ...] = ()  # flags kttune does not know, as written
    env: tuple[str, ...] = ()  # NAME=value words before the program
    argv: tuple[str, ...] = field(default=(), compare=False)

    def get(self, key: str, default=None):
        return self.values.get(key, default)

    def given(self, key: str) -> bool:
        return key in self.values

    def notes(self) -> tuple[str, ...]:
        """One line per flag read but not modelled, and one for the unknown ones."""
        out = [f"{flag}: {why}" for flag, why in self.ignored]
        if self.unknown:
            out.append(f"not flags of sglang-kt 0.7.2 that kttune knows, ignored: {', '.join(self.unknown)}")
        return tuple(out)


def split_command(text: str) -> list[str]:
    """A command as pasted from a shell (backslash-newline continuations, quotes) into its words."""
    try:
        return [w for w in shlex.split(text.replace("\\\r\n", " ").replace("\\\n", " ")) if w.strip()]
    except ValueError as e:
        raise UserError(
            f"cannot read the launch command ({e})",
            'quote it as the shell would, e.g. {command} "python -m ..."',
            params=("command",),
        ) from None


def _program_end(words: Sequence[str]) -> tuple[int, tuple[str, ...]]:
    """Where the flags start, after `NAME=value` words and `python[3] -m sglang.launch_server`."""
    i, env = 0, []
    while (
        i < len(words) and "=" in words[i] and not words[i].startswith("-") and words[i].split("=", 1)[0].isidentifier()
    ):
        env.append(words[i])
        i += 1
    if i < len(words) and words[i] == "env":  # `env A=1 python ...`
        i += 1
        while i < len(words) and "=" in words[i] and not words[i].startswith("-"):
            env.append(words[i])
            i += 1
    start = i
    while i < len(words) and not words[i].startswith("--"):
        i += 1
    prog = list(words[start:i])
    if prog:
        ok = prog[-1] in PROGRAMS and (
            len(prog) == 1 or (prog[-2] == "-m" and len(prog) == 3 and prog[0].split("/")[-1].startswith("python"))
        )
        if not ok:
            raise UserError(
                f"not an sglang launch command: {' '.join(prog)!r} where `python -m sglang.launch_server` was expected",
                "pass the command as you run it, e.g. kttune explain -- python -m sglang.launch_server "
                f"{flag_name('model_path')} ...",
            )
    return i, tuple(env)


def _value(flag: LaunchFlag, written: str, text: str):
    try:
        if flag.kind is int:
            return int(text)
        if flag.kind is float:
            return float(text)
    except ValueError:
        what = "a whole number" if flag.kind is int else "a number"
        raise UserError(
            f"{written} {text!r} is not {what}",
            f"pass {written} as sglang-kt takes it, e.g. {written} 8192"
            if flag.kind is int
            else f"pass e.g. {written} 0.9",
        ) from None
    return text


def parse_launch_command(command: str | Sequence[str]) -> ParsedLaunch:
    """Read a sglang-kt 0.7.2 launch command (a string as typed in a shell, or its words): every
    flag of `FLAGS` under any of its spellings (`--flag value` or `--flag=value`; the last one wins,
    as in argparse), the flags of `IGNORED` noted, any other `--flag` (and the value after it, when
    one follows) reported as unknown. UserError on a flag without its value or a value of the
    wrong type, or words that are not a launch command."""
    words = split_command(command) if isinstance(command, str) else [str(w) for w in command]
    i, env = _program_end(words)
    values: dict[str, object] = {}
    ignored: list[tuple[str, str]] = []
    unknown: list[str] = []
    stray: list[str] = []
    while i < len(words):
        w = words[i]
        if not w.startswith("--"):
            stray.append(w)
            i += 1
            continue
        name, eq, inline = w.partition("=")
        nxt = words[i + 1] if i + 1 < len(words) else None
        has_next_value = nxt is not None and not nxt.startswith("--")
        flag = _BY_NAME.get(name)
        if flag is not None:
            if flag.kind is bool:
                if eq:
                    raise UserError(f"{name} is a switch and takes no value", f"write {name} alone")
                values[flag.key] = True
                i += 1
                continue
            if flag.kind is list:
                items, i = ([inline] if eq else []), i + 1
                while not eq and i < len(words) and not words[i].startswith("--"):
                    items.append(words[i])
                    i += 1
                if not items:
                    raise UserError(f"{name} has no value", f"write {name} VALUE ... ({flag.meaning})")
                values[flag.key] = tuple(
                    _value(LaunchFlag(flag.key, flag.names, int, flag.meaning), name, t)
                    for t in ",".join(items).replace(",", " ").split()
                )
                continue
            if eq:
                text, i = inline, i + 1
            elif has_next_value:
                text, i = nxt, i + 2
            else:
                raise UserError(f"{name} has no value", f"write {name} VALUE ({flag.meaning})")
            values[flag.key] = _value(flag, name, text)
            continue
        if name in _IGNORED_BY_NAME:
            takes, note = _IGNORED_BY_NAME[name]
            ignored.append((name, note))
            i += 1 + (1 if takes and not eq and has_next_value else 0)
            continue
        unknown.append(name)
        i += 1 + (1 if not eq and has_next_value else 0)
    for key, why in _NOT_MODELLED.items():
        if key in values:
            ignored.append((flag_name(key), why))
    if stray:
        unknown.append("words " + " ".join(repr(s) for s in stray))
    return ParsedLaunch(values, tuple(ignored), tuple(unknown), env, tuple(words))
