"""Generated bad inputs through the CLI (kttune.cli.main, in process): sizes, config.json
documents, hardware profiles, workloads and storage URLs. Each must end in exit code 2 with
exactly one `error:` line on stderr, no traceback, and no file outside the cache changed."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kttune.cli import main
from kttune.hw.profile import profile_to_dict
from kttune.hw.registry import load_shipped
from kttune.spec.catalog import catalog_config

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MODEL = "qwen3-30b-a3b"
BASE_CONFIG = {k: v for k, v in catalog_config(MODEL).items() if not k.startswith("_")}
BASE_PROFILE = profile_to_dict(load_shipped("datasheet-h200-pcie5-xeon-amx-16c"))


def snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under root (but `skip`, the cache): size, mtime and content hash."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        if Path(dirpath).is_relative_to(skip):
            continue
        for f in files:
            p = Path(dirpath) / f
            st_ = p.stat()
            out[str(p)] = (st_.st_size, st_.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def check_bad(capsys, argv: list[str], root: Path) -> str:
    """Run argv; assert the bad-input contract. Returns the error line."""
    cache = Path(os.environ["KTTUNE_CACHE_DIR"])
    before = snapshot(root, cache)
    code = main(argv)
    out = capsys.readouterr()
    lines = [ln for ln in out.err.splitlines() if ln.strip()]
    assert code == 2, (argv, code, out.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), (argv, out.err[-2000:])
    assert "Traceback" not in out.err + out.out
    assert snapshot(root, cache) == before, argv
    return lines[0]


def search(*extra: str, model: str = MODEL, vram: str = "32G") -> list[str]:
    return ["search", "--model", model, "--vram", vram, "--trials", "5", *extra]


# ---- sizes ------------------------------------------------------------------------------------------

bad_sizes = st.one_of(
    st.sampled_from(["0", "0G", "-5G", "G", "", "32 Q", "1e3G", "9999T", "1P", "600G", "NaN", "inf", "32GiBs", "0.0"]),
    st.text(alphabet="abcxyz!?%$ ", min_size=1, max_size=6),
    st.integers(min_value=513, max_value=10**9).map(lambda n: f"{n}G"),
    st.integers(min_value=1, max_value=10**6).map(lambda n: f"{n}T"),
)


def _parses_within(text: str, limit: int) -> bool:
    from kttune.errors import UserError
    from kttune.units import parse_size_bytes

    try:
        return parse_size_bytes(text) <= limit
    except UserError:
        return False


@FUZZ
@given(vram=bad_sizes, which=st.sampled_from(["--vram", "--host-ram"]))
def test_bad_sizes(capsys, vram, which):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        storage = str(root / "s.journal")
        argv = search("--storage", storage) if which == "--vram" else search("--storage", storage, "--host-ram", vram)
        if which == "--vram":
            argv[argv.index("32G")] = vram
        if which == "--host-ram" and _parses_within(vram, 64 * 2**40):
            return  # a real server's RAM (up to 64 TiB) is fine
        check_bad(capsys, argv, root)


@FUZZ
@given(gpus=st.one_of(st.integers(max_value=0), st.integers(min_value=65, max_value=10**6),
                      st.sampled_from([3, 5, 6, 7, 12, 24])))
def test_bad_gpu_counts(capsys, gpus):
    """qwen3-30b-a3b: 32 attention heads and 4 KV heads; TP must split both (or replicate KV)."""
    with tempfile.TemporaryDirectory() as d:
        line = check_bad(capsys, search("--gpus", str(gpus), "--storage", str(Path(d) / "s.journal")), Path(d))
        if 1 <= gpus <= 64:
            assert "heads" in line and "use --gpus 1, 2, 4 or 8" in line


# ---- config.json ------------------------------------------------------------------------------------

REQUIRED = ["hidden_size", "num_hidden_layers", "num_experts_per_tok", "moe_intermediate_size",
            "num_attention_heads", "num_key_value_heads", "vocab_size", "num_experts"]
bad_values = st.one_of(st.sampled_from([0, -1, -(10**6), 10**12, "abc", "", [1], {"x": 1}, True, False]),
                       st.integers(max_value=0), st.integers(min_value=1 << 25, max_value=1 << 40))
whole_docs = st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=5), st.none())


@FUZZ
@given(data=st.data())
def test_bad_configs(capsys, data):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        mdir = root / "model"
        mdir.mkdir()
        if data.draw(st.booleans(), label="whole document"):
            doc = data.draw(whole_docs, label="doc")
        else:
            doc = copy.deepcopy(BASE_CONFIG)
            for key in data.draw(st.lists(st.sampled_from(REQUIRED), min_size=1, max_size=3, unique=True), label="keys"):
                # dropped only where no fallback key holds a valid value (intermediate_size does)
                if data.draw(st.booleans(), label=f"drop {key}") and key not in ("num_key_value_heads", "num_experts", "moe_intermediate_size"):
                    del doc[key]
                else:
                    doc[key] = data.draw(bad_values, label=key)
            if doc.get("num_key_value_heads") is True:  # True reads as 1: a valid head count
                doc["hidden_size"] = 0
        (mdir / "config.json").write_text(json.dumps(doc))
        check_bad(capsys, search("--storage", str(root / "s.journal"), model=str(mdir)), root)


@pytest.mark.parametrize("layers", [1 << 30, (1 << 12) + 1])
def test_huge_layer_count_is_refused_before_per_layer_tables(capsys, tmp_path, layers):
    # a fresh clone's fuzz run once drew num_hidden_layers near 2**30: the loader built its per-layer
    # tables first and took every byte of RAM before the size check ran
    mdir = tmp_path / "model"
    mdir.mkdir()
    (mdir / "config.json").write_text(json.dumps(BASE_CONFIG | {"num_hidden_layers": layers}))
    line = check_bad(capsys, search("--storage", str(tmp_path / "s.journal"), model=str(mdir)), tmp_path)
    assert "num_hidden_layers" in line and str(layers) in line


def test_dbrx_style_moe_is_not_called_dense(capsys, tmp_path):
    mdir = tmp_path / "dbrx"
    mdir.mkdir()
    (mdir / "config.json").write_text(json.dumps({
        "model_type": "dbrx", "d_model": 6144, "n_layers": 40, "n_heads": 48, "vocab_size": 100352,
        "ffn_config": {"moe_num_experts": 16, "moe_top_k": 4, "ffn_hidden_size": 10752}}))
    line = check_bad(capsys, search("--storage", str(tmp_path / "s.journal"), model=str(mdir)), tmp_path)
    assert "dense" not in line and "mixture-of-experts" in line and "ffn_config.moe_num_experts" in line


# ---- hardware profiles --------------------------------------------------------------------------------

def _mutated_profile(data) -> object:
    kind = data.draw(st.sampled_from(["whole", "points", "time", "x", "keys"]), label="kind")
    if kind == "whole":
        return data.draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=4)))
    doc = copy.deepcopy(BASE_PROFILE)
    i = data.draw(st.integers(0, len(doc["curves"]) - 1), label="curve")
    curve = doc["curves"][i]
    if kind == "points":
        curve["points"] = data.draw(st.sampled_from([[], None, "x", [1, 2]]), label="points")
    elif kind == "time":
        j = data.draw(st.integers(0, len(curve["points"]) - 1))
        curve["points"][j]["t_ms"] = data.draw(st.sampled_from([0, 0.0, -1, -1e-9, math.nan, math.inf, "fast", None]))
    elif kind == "x":
        j = data.draw(st.integers(0, len(curve["points"]) - 1))
        curve["points"][j]["x"] = data.draw(st.sampled_from([0, -5, math.nan, -math.inf, "big", None]))
    else:
        del doc[data.draw(st.sampled_from(["format", "version", "inventory", "provenance"]))]
    return doc


@FUZZ
@given(data=st.data())
def test_bad_profiles(capsys, data):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        prof = root / "profile.json"
        prof.write_text(json.dumps(_mutated_profile(data)))
        check_bad(capsys, search("--storage", str(root / "s.journal"), "--profile", str(prof)), root)


def test_bad_cached_profile_is_one_line_naming_the_fix(capsys, tmp_path):
    """A broken profile in the cache (this machine's fingerprint) is named, with `probe --fresh`."""
    from kttune.hw.fingerprint import fingerprint
    from kttune.paths import profile_cache_path
    from kttune.probes.inventory import collect_inventory

    cached = profile_cache_path(fingerprint(collect_inventory()))
    cached.parent.mkdir(parents=True)
    for doc in ([1, 2], {**BASE_PROFILE, "curves": [{**BASE_PROFILE["curves"][0], "points": []}]}):
        cached.write_text(json.dumps(doc))
        line = check_bad(capsys, search("--storage", str(tmp_path / "s.journal")), tmp_path)
        assert "cached profile" in line and "kttune probe --fresh" in line


# ---- workloads --------------------------------------------------------------------------------------

@FUZZ
@given(data=st.data())
def test_bad_workloads(capsys, data):
    doc = {"prompt_tokens": [512, 4096], "weights": [0.5, 0.5], "output_tokens": 256, "concurrency": 8,
           "decode_weight": 0.3}
    field = data.draw(st.sampled_from(["weights", "prompt_tokens", "output_tokens", "concurrency", "decode_weight",
                                       "whole"]))
    if field == "weights":
        doc["weights"] = [data.draw(st.sampled_from([math.nan, math.inf, -1.0, "x", None])), 0.5]
    elif field == "prompt_tokens":
        doc["prompt_tokens"] = data.draw(st.sampled_from([[0, 5], [-3, 4], [10**9, 5], ["a", 1], [], [1, 2, 3]]))
    elif field in ("output_tokens", "concurrency"):
        doc[field] = data.draw(st.sampled_from([0, -1, 10**9, "many", None, [1]]))
    elif field == "decode_weight":
        doc[field] = data.draw(st.sampled_from([math.nan, -0.1, 1.5, math.inf, "half"]))
    else:
        doc = data.draw(st.one_of(st.integers(), st.text(max_size=4), st.just({}), st.just([])))
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        wl = root / "wl.json"
        wl.write_text(json.dumps(doc))
        check_bad(capsys, search("--storage", str(root / "s.journal"), "--workload", str(wl)), root)


# ---- storage ----------------------------------------------------------------------------------------

@FUZZ
@given(kind=st.sampled_from(["foreign", "devnull", "dir", "under-file", "sqlite-mem", "sqlite-foreign",
                             "sqlite-nodir", "scheme", "sqlite-tables"]),
       content=st.binary(min_size=1, max_size=200).filter(lambda b: not b.lstrip().startswith(b'{"op_code"')))
def test_bad_storage(capsys, kind, content):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        own = root / "notes.txt"
        own.write_bytes(content)
        url = {
            "foreign": str(own),
            "devnull": "/dev/null",
            "dir": str(root),
            "under-file": str(own / "s.journal"),
            "sqlite-mem": "sqlite://" + ["", "/", "/:memory:"][len(content) % 3],
            "sqlite-foreign": f"sqlite:///{own}",
            "sqlite-nodir": f"sqlite:///{root}/missing/x.db",
            "scheme": "nosuchdb://host/x",
            "sqlite-tables": f"sqlite:///{root}/other.db",
        }[kind]
        if kind == "sqlite-foreign" and content.startswith(b"SQLite format 3"):
            return
        if kind == "sqlite-tables":
            import sqlite3

            con = sqlite3.connect(root / "other.db")
            con.execute("create table mine (x)")
            con.commit()
            con.close()
        line = check_bad(capsys, search("--storage", url), root)
        assert own.read_bytes() == content
        if kind in ("foreign", "sqlite-foreign", "sqlite-tables"):
            assert "untouched" in line


@pytest.mark.parametrize("kind", sorted({c["kind"] for c in BASE_PROFILE["curves"]}))
def test_profile_missing_a_curve_kind_runs_or_says_what_is_missing(capsys, tmp_path, kind):
    """A well-formed profile without one kind of curve: the search runs on what it has (optional
    curves) or stops with one line naming the missing measurement; never a traceback."""
    doc = {**BASE_PROFILE, "curves": [c for c in BASE_PROFILE["curves"] if c["kind"] != kind]}
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(doc))
    code = main(search("--storage", str(tmp_path / "s.journal"), "--profile", str(prof)))
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    if code != 0:
        lines = [ln for ln in out.err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and "no" in lines[0] and "measurements" in lines[0], out.err
