import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import pytest
from hypothesis import settings

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


@pytest.mark.parametrize(
    "body",
    [
        '{"prompt_tokens": []}',
        '{"prompt_tokens": [100], "weights": [1, 2]}',
        '{"prompt_tokens": [-5]}',
        '{"prompt_tokens": [100], "decode_weight": 3}',
        "{oops",
    ],
)
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


# ---- one namespace, every form -------------------------------------------------------------------


def _write(tmp_path, body, name="w.json") -> str:
    f = tmp_path / name
    f.write_text(body if isinstance(body, str) else json.dumps(body))
    return str(f)


@settings(max_examples=40, deadline=None)
@given(xs=st.lists(st.integers(1, 300_000), min_size=1, max_size=200))
def test_a_list_of_lengths_is_a_sample_whatever_its_form(xs):
    """{"prompt_tokens": L} without weights, {"samples": L} and the bare list L are one workload."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        got = {
            (w.prompt_tokens, w.weights)
            for w in (
                load_workload(_write(root, {"prompt_tokens": xs}, "a.json")),
                load_workload(_write(root, {"samples": xs}, "b.json")),
                load_workload(_write(root, xs, "c.json")),
            )
        }
    assert len(got) == 1
    ((reps, ws),) = got
    assert len(reps) <= 12 and sum(ws) == pytest.approx(1.0) and min(xs) <= min(reps) and max(reps) <= max(xs)


def test_large_lists_are_binned_weighted_or_not(tmp_path):
    xs = list(range(1000, 201_000, 2))
    w = load_workload(_write(tmp_path, {"prompt_tokens": xs}))
    assert len(w.prompt_tokens) == 12 and w.mean_prompt_tokens == pytest.approx(sum(xs) / len(xs), rel=0.02)
    weighted = load_workload(
        _write(tmp_path, {"prompt_tokens": xs[:500], "weights": [1 + i % 7 for i in range(500)]}, "v.json")
    )
    assert len(weighted.prompt_tokens) == 12 and sum(weighted.weights) == pytest.approx(1.0)
    # twelve or fewer weighted lengths stay as given
    few = load_workload(_write(tmp_path, {"prompt_tokens": [4000, 1000], "weights": [3, 1]}, "f.json"))
    assert few.prompt_tokens == (4000, 1000) and few.weights == (0.75, 0.25)


def test_log_normal_presets_are_their_distributions():
    """The search scores the log-normal's quantiles at bin middles, at the clipped log-normal's mean
    output; simulate draws from it (its sample statistics, computed independently, agree)."""
    from kttune.sim.workload import mix_statistics

    for name in ("arxiv-summarize", "sharegpt-chat"):
        w = load_workload(name)
        assert w.form == "log-normal" and w.mix is not None and len(w.prompt_tokens) == 12
        st_ = mix_statistics(w.mix, n=40_000, seed=7)
        assert w.output_tokens == pytest.approx(st_["output_tokens"]["mean"], rel=0.02)
        assert w.mean_prompt_tokens == pytest.approx(st_["prompt_tokens"]["mean"], rel=0.05)
        assert w.prompt_tokens[6] == pytest.approx(st_["prompt_tokens"]["p50"], rel=0.1)


def test_every_preset_says_what_each_command_uses():
    for n in preset_names():
        w = load_workload(n)
        u = w.to_dict()["uses"]
        assert "prompt length" in u["search"] and str(w.output_tokens) in u["search"]
        assert ("log-normal" in u["simulate"]) == (w.form == "log-normal")


BAD = [
    ('{"prompt_tokens": [100, 200],\n "weights": [1, 2,]}', "line 2, column 19"),
    (
        '{"arrival_s": 0, "prompt_tokens": 9, "output_tokens": 2}\n{"arrival_s": 1, "prompt_tokens": 9, "output_tokens": 2}',
        ".jsonl",
    ),
    ('{"prompt_tokens": [100, NaN]}', "prompt_tokens[1] is nan"),
    ('{"prompt_tokens": [100], "weights": [Infinity]}', "weights[0] is inf"),
    ('{"prompt_tokens": [100, true]}', "prompt_tokens[1] is true, not a number"),
    ('{"prompt_tokens": ["100"]}', 'prompt_tokens[0] is "100", not a number'),
    ('{"prompt_tokens": [100, -2]}', "prompt_tokens[1] is -2"),
    ('{"prompt_tokens": [100, 0]}', "prompt_tokens[1] is 0"),
    ('{"prompt_tokens": [100, 1e9]}', "16,777,216"),
    ('{"prompt_tokens": [100.5]}', "prompt_tokens[0] is 100.5"),
    ('{"prompt_tokens": []}', "prompt_tokens is empty"),
    ('{"samples": []}', "samples is empty"),
    ("[]", "samples is empty"),
    ('{"prompt_tokens": "lots"}', "not a list"),
    ('{"prompt_tokens": [100, 200], "weights": [1]}', "weights has 1 entries, prompt_tokens 2"),
    ('{"prompt_tokens": [100], "weights": [-1]}', "not negative"),
    ('{"prompt_tokens": [100, 200], "weights": [0, 0]}', "sum to 0"),
    ('{"prompt_tokens": [100], "weight": [1]}', "did you mean 'weights'"),
    ('{"samples": [100], "prompt_tokens": [100]}', "keep one"),
    ('{"samples": [100], "weights": [1]}', "weights without a list of prompt_tokens"),
    ('{"output_tokens": 5}', "no prompt lengths"),
    ('{"prompt_tokens": [100], "output_tokens": 1.5}', "output_tokens 1.5 is not a whole number"),
    ('{"prompt_tokens": [100], "output_tokens": -3}', "output_tokens -3 is outside"),
    ('{"prompt_tokens": [100], "concurrency": 0}', "concurrency 0 is outside"),
    ('{"prompt_tokens": [100], "decode_weight": NaN}', "decode_weight is nan"),
    ('{"prompt_tokens": [100], "ttft_slo_ms": -5}', "not a positive time"),
    ('{"prompt_tokens": [100], "name": 5}', "name is 5, not a string"),
    ('{"prompt_tokens": {"median": 100}, "output_tokens": {"median": 9, "sigma": 1}}', "needs median and sigma"),
    (
        '{"prompt_tokens": {"median": 100, "sigma": 1, "min": 50, "max": 10}, "output_tokens": {"median": 9, "sigma": 1}}',
        "above its max",
    ),
    ('{"prompt_tokens": {"median": 100, "sigma": 0.5}}', "needs a log-normal output_tokens"),
    ('{"prompt_tokens": [100], "output_tokens": {"median": 9, "sigma": 1}}', "needs a log-normal prompt_tokens"),
    (
        '{"prompt_tokens": {"median": 100, "sigma": 0.5, "mean": 3}, "output_tokens": {"median": 9, "sigma": 1}}',
        "unknown key 'mean'",
    ),
    ("7", "a JSON int, not a workload"),
    ('"rag"', "a JSON str, not a workload"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"prompt_tokens": [' + "9" * 5000 + "]}", "cannot read"),
]


@pytest.mark.parametrize("body,needle", BAD)
def test_each_bad_workload_is_one_line_naming_the_problem(tmp_path, body, needle):
    with pytest.raises(UserError) as e:
        load_workload(_write(tmp_path, body))
    line = e.value.line()
    assert needle in line and "\n" not in line and "w.json" in line, line


def test_a_trace_is_a_workload_too(tmp_path):
    """Search takes a trace's prompts, binned exactly, and its mean output."""
    rows = [(i * 0.5, 1000 + 37 * (i % 50), 10 + i % 7) for i in range(400)]
    f = _write(
        tmp_path, "arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows), "t.csv"
    )
    w = load_workload(f)
    assert w.form == "trace" and w.trace.rows == 400 and len(w.prompt_tokens) == 12
    assert w.output_tokens == round(sum(o for _, _, o in rows) / 400)
    same = load_workload(_write(tmp_path, {"samples": [p for _, p, _ in rows]}))
    assert (w.prompt_tokens, w.weights) == (same.prompt_tokens, same.weights)


def test_a_missing_file_names_the_forms(tmp_path):
    with pytest.raises(UserError, match="does not exist.*trace"):
        load_workload(str(tmp_path / "nope.csv"))


@given(
    st.lists(
        st.tuples(st.integers(1, 200_000), st.floats(0.01, 10)), min_size=1, max_size=30, unique_by=lambda x: x[0]
    ),
    st.integers(1, 6),
)
def test_reduced_keeps_the_tokens_the_share_and_the_range(rows, k):
    """A reduced workload: at most k lengths, in order, inside the workload's range, weights that
    still sum to 1, and the request-weighted tokens kept (to rounding)."""

    from kttune.search.workload import Workload

    total = sum(w for _, w in rows)
    wl = Workload("w", tuple(p for p, _ in rows), tuple(w / total for _, w in rows))
    r = wl.reduced(k)
    assert (
        r == wl if len(rows) <= k else (len(r.prompt_tokens) <= k and list(r.prompt_tokens) == sorted(r.prompt_tokens))
    )
    assert min(wl.prompt_tokens) <= min(r.prompt_tokens) and max(r.prompt_tokens) <= max(wl.prompt_tokens)
    assert abs(sum(r.weights) - 1) < 1e-9
    assert abs(r.mean_prompt_tokens - wl.mean_prompt_tokens) <= 0.5 + 1e-9


def test_reduced_rag_is_three_of_its_quantiles():
    from kttune.search.workload import load_workload

    r = load_workload("rag").reduced(3)
    assert len(r.prompt_tokens) == 3 and all(abs(w - 1 / 3) < 0.01 for w in r.weights)
