"""Tune's candidates: one measurement per set of identical forwards, the cheapest kept."""

from __future__ import annotations

from dataclasses import replace

from kttune.config import LaunchConfig
from kttune.app.tuning.candidates import dedupe, measurement_key


def cfg(chunk, thr, n=8, threads=13) -> LaunchConfig:
    return LaunchConfig("BF16", 1, n, chunk, thr, 65536, threads)


def test_chunks_beyond_the_longest_prompt_measure_the_same():
    lengths = (3000, 6000)
    assert measurement_key(cfg(8192, 2048), lengths, True) == measurement_key(cfg(16384, 2048), lengths, True)
    assert measurement_key(cfg(4096, 2048), lengths, True) != measurement_key(cfg(8192, 2048), lengths, True)
    # without a layerwise path the threshold changes nothing
    assert measurement_key(cfg(8192, 0), lengths, False) == measurement_key(cfg(8192, 4096), lengths, False)
    # thread counts the CPU variant maps to one are one measurement
    assert measurement_key(cfg(8192, 0, threads=11), lengths, True, lambda t: 1) == measurement_key(
        cfg(8192, 0, threads=15), lengths, True, lambda t: 1
    )


def test_dedupe_keeps_the_first_name_and_the_cheapest_config():
    a, b, c = cfg(16384, 2048), cfg(8192, 2048), cfg(4096, 2048)
    out = dedupe(
        [("first", a), ("second", b), ("third", c)],
        lambda x: measurement_key(x, (3000,), True),
        lambda x: (x.chunked_prefill_size,),
    )
    assert out == [("first", c)]
    out = dedupe(
        [("x", a), ("y", replace(a, num_gpu_experts=2))], lambda x: measurement_key(x, (3000,), True), lambda x: ()
    )
    assert [n for n, _ in out] == ["x", "y"]


def test_the_picks_chunk_neighbours_keep_a_threshold_layerwise_can_fire_at():
    from kttune.app.tuning.candidates import chunk_neighbours

    chunks = (4096, 8192, 16384, 32768)

    def keep_eight(c):  # a budget of exactly the pick's 8 GPU experts at every chunk
        return c.num_gpu_experts <= 8

    out = dict(chunk_neighbours(chunks, cfg(16384, 12288), keep_eight, 128))
    assert set(out) == {"pick at chunk 8192", "pick at chunk 32768"}
    assert out["pick at chunk 8192"] == replace(
        cfg(16384, 12288), chunked_prefill_size=8192, gpu_prefill_token_threshold=8192
    )
    assert out["pick at chunk 32768"] == replace(cfg(16384, 12288), chunked_prefill_size=32768)
    # at the ends of the space one neighbour; a chunk outside the space none
    assert [n for n, _ in chunk_neighbours(chunks, cfg(4096, 1024), keep_eight, 128)] == ["pick at chunk 8192"]
    assert chunk_neighbours(chunks, cfg(12288, 1024), keep_eight, 128) == []


def test_a_chunk_neighbour_holds_the_most_gpu_experts_that_fit_beside_its_chunk():
    """A VRAM law of its own here: activations grow with the chunk, so a budget of 64 units holds
    64 - chunk/1024 experts. The neighbour at a smaller chunk takes the experts the pick could not
    hold, the one at a larger chunk gives some back, and one that fits with none is left out."""
    from kttune.app.tuning.candidates import chunk_neighbours, most_gpu_experts

    def fits(c):
        return c.num_gpu_experts + c.chunked_prefill_size // 1024 <= 64

    chunks = (8192, 16384, 32768, 65536)
    pick = cfg(32768, 1024, n=32)
    out = dict(chunk_neighbours(chunks, pick, fits, most_experts=128))
    assert out["pick at chunk 16384"].num_gpu_experts == 48
    assert out["pick at chunk 65536"].num_gpu_experts == 0  # 64 units of activations: room for none
    assert all(fits(c) and not fits(replace(c, num_gpu_experts=c.num_gpu_experts + 1)) for c in out.values())
    # the bisection agrees with a scan, and a configuration that fits with none gives None
    for chunk in (1024, 8192, 40960):
        scan = max(n for n in range(0, 129) if fits(replace(pick, chunked_prefill_size=chunk, num_gpu_experts=n)))
        got = most_gpu_experts(replace(pick, chunked_prefill_size=chunk), fits, 128)
        assert got.num_gpu_experts == scan
    assert most_gpu_experts(replace(pick, chunked_prefill_size=131072), fits, 128) is None


def test_tune_races_the_chunk_neighbours_at_every_thread_count_it_races():
    """On the shipped H200 profile for qwen3-30b-a3b under 32G: each chunk neighbour of the model's
    pick comes at the pick's thread count and at every other one, fits the budget, and holds the most
    GPU experts that fit beside its chunk (one more does not fit)."""
    from kttune.app.inputs import resolve_inputs
    from kttune.app.tuning.candidates import tune_candidates
    from kttune.cost.components import Components
    from kttune.search.evaluate import evaluate
    from kttune.search.study import StudyOptions, prepare_search, run_search

    base = resolve_inputs("qwen3-30b-a3b", 32 * 2**30, 1, "h200-pcie5-xeon-amx-16c").request
    comp0, space = prepare_search(base)
    pick = run_search(base, StudyOptions(trials=60, seed=0, storage=":memory:")).best.cfg
    comp = Components(base.profile, base.model, base.method, base.tp)
    threads = sorted({11, 13, 15} | {pick.cpuinfer_threads})
    named = dict(tune_candidates(comp, space, base, pick, 2, None, threads, seed=0, model_trials=40))
    neighbours = {n: c for n, c in named.items() if n.startswith("pick at chunk")}
    assert neighbours, named.keys()
    assert {c.cpuinfer_threads for c in neighbours.values()} == set(threads)
    for name, c in neighbours.items():
        assert c.chunked_prefill_size != pick.chunked_prefill_size, name
        assert evaluate(comp, c, base.workload, base.budget).feasible, name
        more = replace(c, num_gpu_experts=c.num_gpu_experts + 1)
        assert (
            c.num_gpu_experts == space.gpu_experts_max or not evaluate(comp, more, base.workload, base.budget).feasible
        ), name
