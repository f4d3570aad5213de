import json

import pytest

from kttune.errors import UserError
from kttune.search.workload import load_workload, preset_names


def test_presets_load_and_weights_sum_to_one():
    assert {"chat", "rag", "long-context"} <= set(preset_names())
    for n in preset_names():
        w = load_workload(n)
        assert abs(sum(w.weights) - 1) < 1e-6
        assert 0 <= w.decode_weight <= 1


def test_user_file_of_samples_is_binned(tmp_path):
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"samples": list(range(100, 100100, 100)), "decode_weight": 0.5, "concurrency": 4}))
    w = load_workload(str(f))
    assert len(w.prompt_tokens) == 12 and w.concurrency == 4
    assert abs(w.mean_prompt_tokens - 50_050) < 2000


def test_a_bare_list_is_samples(tmp_path):
    f = tmp_path / "w.json"
    f.write_text("[1000, 2000, 2000, 4000]")
    w = load_workload(str(f))
    assert w.prompt_tokens == (1000, 2000, 4000) and w.weights == (0.25, 0.5, 0.25)


@pytest.mark.parametrize("body", ['{"prompt_tokens": []}', '{"prompt_tokens": [100], "weights": [1, 2]}',
                                  '{"prompt_tokens": [-5]}', '{"prompt_tokens": [100], "decode_weight": 3}', '{oops'])
def test_bad_workload_files_are_user_errors(tmp_path, body):
    f = tmp_path / "w.json"
    f.write_text(body)
    with pytest.raises(UserError):
        load_workload(str(f))


def test_unknown_preset_suggests_close_names():
    with pytest.raises(UserError, match="did you mean chat"):
        load_workload("chatt")


def test_prompts_clip_to_the_models_context():
    w = load_workload("long-context").clipped(40960)
    assert w.max_prompt_tokens <= 40960 - w.output_tokens
