"""The output check's tolerance (kttune.runner.session.agreement_tolerance) against held-out
measurements: the hybrid-vs-layerwise differences the H200 box recorded on correct paths
(tests/data/output-checks-h200.json) must pass, a wrong expert layout must not."""

import json
from pathlib import Path

import pytest

from kttune.runner.session import BF16_ORDER_TOLERANCE, agreement_tolerance

CHECKS = json.loads((Path(__file__).parents[1] / "data" / "output-checks-h200.json").read_text())["checks"]
WRONG_LAYOUT = 0.3  # the least difference test_session's shifted slot shows (it shows ~100%)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: f"{c['model']}-{c['method']}")
def test_correct_paths_measured_on_the_box_agree(check):
    tol, why = agreement_tolerance(check["method"], check["device"])
    assert check["moe_rel_diff"] <= tol and check["layers_rel_diff"] <= tol, why


def test_fp8_on_cuda_is_looser_than_bf16_and_still_catches_a_wrong_layout():
    fp8, _ = agreement_tolerance("FP8", "cuda")
    assert agreement_tolerance("BF16", "cuda")[0] == BF16_ORDER_TOLERANCE == agreement_tolerance("FP8", "cpu")[0]
    assert BF16_ORDER_TOLERANCE < fp8 < WRONG_LAYOUT / 3
    # the measured FP8 difference is past bf16's tolerance: the old fixed 3% turned layerwise off
    fp8_check = next(c for c in CHECKS if c["method"] == "FP8")
    assert fp8_check["moe_rel_diff"] > BF16_ORDER_TOLERANCE
