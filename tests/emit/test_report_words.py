"""The search report compares the pick with the `kt run` defaults in words that read at once."""

from __future__ import annotations

import re

from kttune.cli import main
from kttune.units import times_faster

WORDS = r"(\d+(?:\.\d)?x (?:faster|slower)|the same)"


def test_the_kt_run_comparison_says_faster_or_slower_with_a_factor_of_at_least_one(capsys):
    # seed 1, 60 trials: a pick whose decode is slower than the kt run defaults' (prefill is faster)
    argv = ["search", "-m", "qwen3-30b-a3b", "--vram", "32G", "--trials", "60", "--seed", "1", "--storage", ":memory:",
            "--json"]
    assert main(argv) == 0
    out = capsys.readouterr()
    [line] = [ln for ln in out.err.splitlines() if ln.startswith("against `kt run` defaults")]
    m = re.fullmatch(rf"against `kt run` defaults: mean prefill {WORDS}, decode {WORDS}", line)
    assert m, line
    import json

    doc = json.loads(out.out)
    best, base = doc["pick"]["predicted"], doc["kt_run_default"]["predicted"]
    assert m.group(1) == times_faster(best["mean_prefill_ms"], base["mean_prefill_ms"], lower_is_faster=True)
    assert m.group(2) == times_faster(best["decode_tok_s"], base["decode_tok_s"], lower_is_faster=False)
    assert "0." not in line.split(":", 1)[1]  # never "0.89x"
