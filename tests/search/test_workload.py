import json

from hypothesis import given
from hypothesis import strategies as st

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


@given(st.lists(st.tuples(st.integers(1, 200_000), st.floats(0.01, 10)), min_size=1, max_size=30, unique_by=lambda x: x[0]),
       st.integers(1, 6))
def test_reduced_keeps_the_tokens_the_share_and_the_range(rows, k):
    """A reduced workload: at most k lengths, in order, inside the workload's range, weights that
    still sum to 1, and the request-weighted tokens kept (to rounding)."""
    from hypothesis import assume

    from kttune.search.workload import Workload

    total = sum(w for _, w in rows)
    wl = Workload("w", tuple(p for p, _ in rows), tuple(w / total for _, w in rows))
    r = wl.reduced(k)
    assert r == wl if len(rows) <= k else (len(r.prompt_tokens) <= k and list(r.prompt_tokens) == sorted(r.prompt_tokens))
    assert min(wl.prompt_tokens) <= min(r.prompt_tokens) and max(r.prompt_tokens) <= max(wl.prompt_tokens)
    assert abs(sum(r.weights) - 1) < 1e-9
    assert abs(r.mean_prompt_tokens - wl.mean_prompt_tokens) <= 0.5 + 1e-9


def test_reduced_rag_is_three_of_its_quantiles():
    from kttune.search.workload import load_workload

    r = load_workload("rag").reduced(3)
    assert len(r.prompt_tokens) == 3 and all(abs(w - 1 / 3) < 0.01 for w in r.weights)
