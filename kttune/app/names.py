"""What the command line declares from the library before anything heavy is loaded: the defaults
its help states and sglang-kt's spellings of the flags it also accepts. Light on purpose: every
`kttune` invocation, `--help` included, imports it."""

from __future__ import annotations

from kttune.memory.vram import DEFAULT_VRAM_MARGIN
from kttune.search.storage_url import forget_passwords, redact
from kttune.spec.launch_args import names_of as sglang_names

DEFAULT_TRIALS = 300  # model-evaluated trials of a search (5-8 ms each on a 2-core VM)
DEFAULT_MEASURED_TRIALS = 20  # measured trials of `search --measure`
DEFAULT_WORKLOAD = "rag"  # the search's default workload; `simulate` and `validate` look at the same traffic

__all__ = [
    "DEFAULT_MEASURED_TRIALS",
    "DEFAULT_TRIALS",
    "DEFAULT_VRAM_MARGIN",
    "DEFAULT_WORKLOAD",
    "forget_passwords",
    "redact",
    "sglang_names",
]
