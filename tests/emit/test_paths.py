"""`kttune paths` summary lines read from the H200 results (tests/data/paths-h200.json): each crossover line carries the
measured size and the three predictions with their errors, as the summary holds them."""

from __future__ import annotations

import json

from kttune.emit.paths import markdown, summary_lines
from tests.helpers import PATHS_H200 as RESULTS


def test_crossover_lines_carry_every_prediction_and_its_error():
    for blob in json.loads(RESULTS.read_text())["results"]:
        lines = summary_lines(blob)
        for n, c in blob["summary"]["crossover"].items():
            [line] = [ln for ln in lines if ln.startswith(f"crossover n={n}:")]
            assert f"measured {c['measured']}, predicted {c['predicted']} (error {round(100 * c['error'])}%)" in line
            assert (
                f"calibrated on the switch runs {c['predicted_calibrated']} (error {round(100 * c['error_calibrated'])}%)"
                in line
            )
            assert (
                f"calibrated on the other GPU-expert counts' runs {c['predicted_calibrated_other_n']} "
                f"(error {round(100 * c['error_calibrated_other_n'])}%)"
            ) in line
        md = markdown(blob, "t")
        assert all(f"- {ln}" in md for ln in lines)
        assert md.count("\n| ") == len(blob["runs"]) + 1  # the header row and one row per run
