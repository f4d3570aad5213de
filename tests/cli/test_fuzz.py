"""Generated bad inputs through the CLI (kttune.cli.main, in process): sizes, every bounded option
of every command, config.json documents and impossible architectures, hardware profiles and
impossible machines, path-runner and report documents, workloads, storage URLs, and output paths
that hold what the command must not replace. Each must end in exit code 2 with exactly one
`error:` line on stderr, no traceback, and no file outside the cache changed.

Then real processes: a reader that goes away (closed stdout, a pipe closed early) leaves the
command's own exit code and no traceback; Ctrl-C while an output is written leaves the old file or
the whole new one."""

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
from tests.helpers import PATHS_H200, interruptible

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
@given(
    gpus=st.one_of(
        st.integers(max_value=0), st.integers(min_value=65, max_value=10**6), st.sampled_from([3, 5, 6, 7, 12, 24])
    )
)
def test_bad_gpu_counts(capsys, gpus):
    """qwen3-30b-a3b: 32 attention heads and 4 KV heads; TP must split both (or replicate KV)."""
    with tempfile.TemporaryDirectory() as d:
        line = check_bad(capsys, search("--gpus", str(gpus), "--storage", str(Path(d) / "s.journal")), Path(d))
        if 1 <= gpus <= 64:
            assert "heads" in line and "use --gpus 1, 2, 4 or 8" in line


# ---- config.json ------------------------------------------------------------------------------------

REQUIRED = [
    "hidden_size",
    "num_hidden_layers",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "num_experts",
]
bad_values = st.one_of(
    st.sampled_from([0, -1, -(10**6), 10**12, "abc", "", [1], {"x": 1}, True, False]),
    st.integers(max_value=0),
    st.integers(min_value=1 << 25, max_value=1 << 40),
)
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
            for key in data.draw(
                st.lists(st.sampled_from(REQUIRED), min_size=1, max_size=3, unique=True), label="keys"
            ):
                # dropped only where no fallback key holds a valid value (intermediate_size does)
                if data.draw(st.booleans(), label=f"drop {key}") and key not in (
                    "num_key_value_heads",
                    "num_experts",
                    "moe_intermediate_size",
                ):
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
    (mdir / "config.json").write_text(
        json.dumps(
            {
                "model_type": "dbrx",
                "d_model": 6144,
                "n_layers": 40,
                "n_heads": 48,
                "vocab_size": 100352,
                "ffn_config": {"moe_num_experts": 16, "moe_top_k": 4, "ffn_hidden_size": 10752},
            }
        )
    )
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
    doc = {
        "prompt_tokens": [512, 4096],
        "weights": [0.5, 0.5],
        "output_tokens": 256,
        "concurrency": 8,
        "decode_weight": 0.3,
    }
    field = data.draw(
        st.sampled_from(["weights", "prompt_tokens", "output_tokens", "concurrency", "decode_weight", "whole"])
    )
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
@given(
    kind=st.sampled_from(
        [
            "foreign",
            "devnull",
            "dir",
            "under-file",
            "sqlite-mem",
            "sqlite-foreign",
            "sqlite-nodir",
            "scheme",
            "sqlite-tables",
        ]
    ),
    content=st.binary(min_size=1, max_size=200).filter(lambda b: not b.lstrip().startswith(b'{"op_code"')),
)
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


# ---- every bounded option of every command ----------------------------------------------------------
# The CLI's numeric options are declared with kttune.cli.bounds.bounded: a value outside the rule
# (NaN, infinity, below, above, absurdly large) is refused when the option is read, before the
# command loads a model or measures anything.


def _bounded_options() -> list[tuple[str, str, object]]:
    import typer

    from kttune.cli import app
    from kttune.cli.bounds import flag_of, rule_of

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, (*path, name))
        for p in cmd.params:
            if rule_of(p) is not None:
                yield " ".join(path), flag_of(p), rule_of(p)

    return sorted(walk(typer.main.get_command(app), ()), key=lambda t: t[:2])


BOUNDED = _bounded_options()


def _minimal_argv(command: str, root: Path) -> list[str]:
    """Each command with its required arguments, valid: only the drawn option is bad."""
    return {
        "search": search("--storage", str(root / "s.journal")),
        "explain": ["explain", "--model", MODEL, "--vram", "32G", "--gpu-experts", "0"],
        "simulate": ["simulate", "--model", MODEL, "--requests", "20"],
        "validate": [
            "validate",
            "--model",
            MODEL,
            "--vram",
            "32G",
            "--gpu-experts",
            "0",
            "--server-module",
            "kttune.validate.standin",
        ],
        "paths": ["paths", MODEL, "--small", "--device", "cpu"],
        "probe": ["probe", "--quick", "--cpu-only"],
        "tune": ["tune", "--model", MODEL, "--vram", "32G", "--evaluator", "model", "--state", str(root / "t.json")],
        "profile derive": [
            "profile",
            "derive",
            "datasheet-h200-pcie5-xeon-amx-16c",
            "-o",
            str(root / "d.json"),
            "--cpu-cores",
            "16",
        ],
    }[command]


def _bad_values(rule) -> st.SearchStrategy[str]:
    fixed = ["nan", "inf", "-inf", "1e999", str(-(10**20)), str(10**20), "99999999999999999999"]
    if rule.integer:
        below = st.integers(max_value=int(rule.lo) - 1, min_value=-(10**30))
        above = st.integers(min_value=int(rule.hi) + 1, max_value=10**30)
        return st.one_of(
            st.sampled_from([v for v in fixed if v[0].isdigit() or v[0] == "-" and v[1:].isdigit()]),
            below.map(str),
            above.map(str),
        )
    # an offset from the bound, not floats near it: kt-kernel, once loaded in the test process,
    # sets flush-to-zero, and Hypothesis then cannot draw floats next to 0
    offset = st.floats(min_value=1e-3, max_value=1e12)
    edges = [rule.lo] * rule.lo_open + [rule.hi] * rule.hi_open
    return st.one_of(
        st.sampled_from(fixed + [repr(float(e)) for e in edges]),
        offset.map(lambda d: repr(rule.lo - d)),
        offset.map(lambda d: repr(rule.hi + d)),
    )


def test_the_fuzzed_commands_are_every_command_with_a_bounded_option():
    commands = {c for c, _, _ in BOUNDED}
    assert commands == {"search", "explain", "simulate", "validate", "paths", "probe", "profile derive", "tune"}
    assert len(BOUNDED) >= 40


@FUZZ
@given(data=st.data())
def test_bad_option_values(capsys, data):
    command, flag, rule = data.draw(st.sampled_from(BOUNDED), label="option")
    value = data.draw(_bad_values(rule), label=flag)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        argv = _minimal_argv(command, root)
        if flag in argv:  # a required option the minimal argv gives: replace its value
            argv[argv.index(flag) + 1] = value
        else:
            argv += [f"{flag}={value}"]  # `=`: a negative value is a value, not an option
        line = check_bad(capsys, argv, root)
        assert flag in line, (argv, line)


# ---- documents the user hands back: path-runner results (calibrate), reports ----------------------

RESULTS_FILE = PATHS_H200
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.text(max_size=3),
    st.just([]),
    st.just({}),
    st.just([1, "x"]),
    st.just({"x": None}),
)


def _near_documents(data) -> object:
    """Documents shaped like kttune's (a path-runner result, a search/explain/simulation result, a
    profile) with one part missing or of the wrong type; or not a document at all."""
    kind = data.draw(st.sampled_from(["whole", "runner", "runner-run", "search", "explain", "sim", "profile"]))
    if kind == "whole":
        return data.draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=4), st.none()))
    if kind == "runner":
        return (
            {"request": data.draw(junk), "runs": data.draw(junk)}
            if data.draw(st.booleans())
            else {"results": [{"request": {"model": MODEL}, "runs": data.draw(junk)}]}
        )
    if kind == "runner-run":
        real = json.loads(RESULTS_FILE.read_text())["results"][0]
        run = dict(real["runs"][0])
        key = data.draw(st.sampled_from(sorted(run)))
        run[key] = data.draw(junk)
        return {"request": real["request"], "runs": [run], "summary": {}}
    if kind == "search":
        return {"pick": data.draw(junk), "pareto": data.draw(junk), "budget": data.draw(junk)}
    if kind == "explain":
        return {"evaluation": data.draw(junk), "by_prompt_tokens": data.draw(junk)}
    if kind == "sim":
        return {"schema": "kttune.simulate/1", "schedules": data.draw(st.sampled_from([[], [{}], [{"schedule": 1}]]))}
    doc = copy.deepcopy(BASE_PROFILE)
    doc[data.draw(st.sampled_from(["inventory", "provenance", "curves"]))] = data.draw(junk)
    return doc


@FUZZ
@given(data=st.data(), command=st.sampled_from(["calibrate", "report"]))
def test_bad_documents(capsys, data, command):
    doc = _near_documents(data)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        f = root / "doc.json"
        f.write_text(json.dumps(doc))
        argv = (
            ["calibrate", str(f), "--profile", "h200-pcie5-xeon-amx-16c", "--out", str(root / "c.json")]
            if command == "calibrate"
            else ["report", str(f), "-o", str(root / "rep")]
        )
        cache = Path(os.environ["KTTUNE_CACHE_DIR"])
        before = snapshot(root, cache)
        code = main(argv)
        out = capsys.readouterr()
        assert "Traceback" not in out.err + out.out
        if code == 0:  # the drawn field is one the reader does not need: a real report / profile came out
            return
        lines = [ln for ln in out.err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (doc, out.err[-2000:])
        assert snapshot(root, cache) == before


# ---- outputs: --out / -o / --report over what is not the command's own earlier output ---------------


def _foreign(data) -> bytes:
    kind = data.draw(st.sampled_from(["bytes", "text", "runner", "search", "measured", "json"]))
    if kind == "bytes":
        return data.draw(st.binary(min_size=1, max_size=64))
    if kind == "text":
        return data.draw(st.text(min_size=1, max_size=40)).encode()
    if kind == "runner":
        return RESULTS_FILE.read_bytes()
    if kind == "search":
        return json.dumps({"pick": {}, "pareto": []}).encode()
    if kind == "measured":  # a profile of another machine than the command's
        return json.dumps(profile_to_dict(load_shipped("h200x2-pcie5-xeon-amx-32c"))).encode()
    return json.dumps(
        data.draw(
            st.one_of(
                st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=3)
            )
        )
    ).encode()


@FUZZ
@given(
    data=st.data(),
    command=st.sampled_from(
        ["derive", "calibrate", "paths", "probe", "report", "report-dir", "derive-input", "calibrate-input"]
    ),
)
def test_outputs_never_replace_what_is_not_their_own(capsys, data, command):
    content = _foreign(data)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        target = root / "target.json"
        target.write_bytes(content)
        if command in ("derive-input", "calibrate-input"):  # the output is the input, whatever it holds
            target.write_bytes(
                RESULTS_FILE.read_bytes() if command == "calibrate-input" else json.dumps(BASE_PROFILE).encode()
            )
        results = str(target if command == "calibrate-input" else RESULTS_FILE)
        argv = {
            "derive": ["profile", "derive", "datasheet-h200-pcie5-xeon-amx-16c", "-o", str(target), "--gpus", "2"],
            "derive-input": ["profile", "derive", str(target), "-o", str(target), "--gpus", "2"],
            "calibrate": ["calibrate", str(RESULTS_FILE), "--profile", "h200-pcie5-xeon-amx-16c", "--out", str(target)],
            "calibrate-input": ["calibrate", results, "--profile", "h200-pcie5-xeon-amx-16c", "--out", str(target)],
            "paths": ["paths", MODEL, "--small", "--device", "cpu", "--out", str(target)],
            "probe": ["probe", "--quick", "--cpu-only", "--out", str(target)],
            "report": ["report", str(RESULTS_FILE), "-o", str(root)],
            "report-dir": search("--storage", ":memory:", "--report", str(root)),
        }[command]
        if command == "paths" and content == RESULTS_FILE.read_bytes():
            return  # its own kind of output: `kttune paths --out` may replace it (it would run the paths)
        line = check_bad(capsys, argv, root)
        assert str(target) in line or str(root) in line, line


# ---- config.json: impossible architectures and JSON past kttune.bounds' limits ----------------------

DSV3_CONFIG = {k: v for k, v in catalog_config("deepseek-v3").items() if not k.startswith("_")}
# Each value is impossible for its key: never truncated, clamped or replaced by a default.
IMPOSSIBLE = {
    "qwen": {
        "hidden_size": [2048.5, -2048, 0],
        "num_experts": [128.7, -128, "128"],
        "head_dim": [0, -128, 1.5, "x"],
        "num_key_value_heads": [5, 3, 7],
        "intermediate_size": [-1, 6144.5],
        "layer_types": [["full_attention"] * 3, "full_attention", 5],
        "mlp_only_layers": ["all", [48], [-1], [1.5], {"0": 1}, "0,1"],
        "decoder_sparse_step": [0, -1, 1.5],
        "max_position_embeddings": [-1, 4096.5],
    },
    "deepseek": {
        "kv_lora_rank": [-512, 0, 511.5],
        "n_shared_experts": [-1, 1.5, "one"],
        "first_k_dense_replace": [-3, 2.5, "x"],
        "moe_layer_freq": [0, -1],
        "q_lora_rank": [-1536],
        "qk_rope_head_dim": [-64],
        "v_head_dim": [-128],
    },
}
# A NaN or Infinity in a key kttune does not read is no attack: transformers writes them (Nemotron-H's
# time_step_limit), and they read as null (tests/spec/test_loader.py); in a key it reads, they are.
TEXT_ATTACKS = [
    '"x": ' + "9" * 5000,
    '"x": ' + "[" * 100_000 + "]" * 100_000,
    '"x": 1e999',
    '"hidden_size": NaN',
    '"hidden_size": Infinity',
    '"num_experts_per_tok": -Infinity',
]


@FUZZ
@given(data=st.data())
def test_impossible_architectures(capsys, data):
    family = data.draw(st.sampled_from(sorted(IMPOSSIBLE)))
    key = data.draw(st.sampled_from(sorted(IMPOSSIBLE[family])))
    doc = copy.deepcopy(BASE_CONFIG if family == "qwen" else DSV3_CONFIG)
    doc[key] = data.draw(st.sampled_from(IMPOSSIBLE[family][key]), label=key)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "model").mkdir()
        (root / "model" / "config.json").write_text(json.dumps(doc))
        line = check_bad(capsys, search("--storage", str(root / "s.journal"), model=str(root / "model")), root)
        assert "config.json" in line and (key in line or "heads" in line), line


@pytest.mark.parametrize("attack", TEXT_ATTACKS)
def test_config_text_past_the_json_limits(capsys, tmp_path, attack):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(BASE_CONFIG)[:-1] + ", " + attack + "}")
    line = check_bad(capsys, search("--storage", str(tmp_path / "s.journal"), model=str(tmp_path / "model")), tmp_path)
    assert "config.json" in line


@FUZZ
@given(data=st.data())
def test_impossible_machines_in_a_profile(capsys, data):
    doc = copy.deepcopy(BASE_PROFILE)
    where = data.draw(st.sampled_from(["cores", "ram", "vram", "gpus", "bandwidth", "calibration"]))
    cpu = doc["inventory"]["cpu"]
    if where == "cores":
        cpu["physical_cores"] = data.draw(st.sampled_from([0, -16, 10**9, 1.5, "16", None, True]))
    elif where == "ram":
        cpu["ram_total_bytes"] = data.draw(st.sampled_from([-1, 10**30, 1.5e20, "128G"]))
    elif where == "vram":
        doc["inventory"]["gpus"][0]["vram_total_bytes"] = data.draw(st.sampled_from([0, -1, 10**15, "80G"]))
    elif where == "gpus":
        doc["inventory"]["gpus"] = doc["inventory"]["gpus"] * 65
    elif where == "bandwidth":
        cpu["mem_bandwidth_gbps"] = data.draw(st.sampled_from([0, -5.0, 1e9, "fast"]))
    else:  # a path-runner correction exp(a + b ln M) that is no number, or no finite factor
        entry = {"method": "BF16", "path": "hybrid", "a": 0.1, "b": 0.0, "points": 8, "source": "runs.json"}
        key, value = data.draw(
            st.sampled_from([("a", "x"), ("a", 1e300), ("b", 50.0), ("b", None), ("path", "fast"), ("method", 5)])
        )
        doc["calibration"] = [entry | {key: value}]
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        prof = root / "profile.json"
        prof.write_text(json.dumps(doc))
        line = check_bad(capsys, search("--storage", str(root / "s.journal"), "--profile", str(prof)), root)
        assert "inventory" in line or "calibration" in line, line


# ---- pipes and signals: real `kttune` processes --------------------------------------------------

import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

KTTUNE = shutil.which("kttune", path=str(Path(sys.executable).parent)) or "kttune"
PROCESS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SHIPPED = "datasheet-h200-pcie5-xeon-amx-16c"
# (argv, the exit code the command has whoever reads it)
READERS = [
    (["models"], 0),
    (["models", "--json"], 0),
    (["workloads"], 0),
    (["profiles", "--json"], 0),
    (["search", "--model", MODEL, "--vram", "32G", "--profile", SHIPPED, "--trials", "10", "--storage", ":memory:"], 0),
    (
        [
            "search",
            "--model",
            MODEL,
            "--vram",
            "32G",
            "--profile",
            SHIPPED,
            "--trials",
            "10",
            "--storage",
            ":memory:",
            "--json",
        ],
        0,
    ),
    (["explain", "--model", MODEL, "--vram", "8G", "--gpu-experts", "0", "--profile", SHIPPED], 1),  # does not fit
]


@PROCESS
@given(case=st.sampled_from(READERS), reader=st.sampled_from(["closed", "gone", "one line"]))
def test_a_reader_that_goes_away_leaves_the_exit_code_alone(tmp_path, case, reader):
    """stdout closed at start (`>&-`), a pipe closed before anything is written, or after one line
    (`| head -1`): the command's own exit code, and no traceback."""
    argv, code = case
    env = dict(os.environ, KTTUNE_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="80")
    if reader == "closed":
        p = subprocess.Popen([KTTUNE, *argv], stderr=subprocess.PIPE, env=env, preexec_fn=lambda: os.close(1))
    else:
        p = subprocess.Popen([KTTUNE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        if reader == "one line":
            p.stdout.readline()
        p.stdout.close()
    err = p.stderr.read().decode(errors="replace")
    p.wait(timeout=300)
    assert p.returncode == code, (argv, reader, err[-2000:])
    assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(delay_s=st.floats(1.0, 8.0))
def test_ctrl_c_while_writing_leaves_the_old_file_or_the_whole_new_one(tmp_path, delay_s):
    """SIGINT at a drawn moment of `kttune calibrate --out F` where F holds the command's earlier
    output: exit 130 with one line (or 0 when it finished first), F either untouched or a whole
    profile, and no temporary file left beside it."""
    env = dict(os.environ, KTTUNE_CACHE_DIR=str(tmp_path / "cache"))
    out = tmp_path / "calibrated.json"
    argv = [KTTUNE, "calibrate", str(RESULTS_FILE), "--profile", "h200-pcie5-xeon-amx-16c", "--out", str(out)]
    assert subprocess.run(argv, capture_output=True, env=env, timeout=300).returncode == 0
    old = out.read_bytes()
    os.utime(out, (0, 0))
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, preexec_fn=interruptible)
    time.sleep(delay_s)
    p.send_signal(signal.SIGINT)
    err = p.stderr.read().decode(errors="replace")
    p.wait(timeout=300)
    # -2: the signal came as the interpreter was exiting, after the work (a shell reports 130)
    assert p.returncode in (0, 130, -signal.SIGINT), err
    assert "Traceback" not in err
    if p.returncode == 130:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "interrupted" in lines[0], err
    new = out.read_bytes()
    assert new == old or json.loads(new)["format"] == "kttune-hardware-profile"
    assert sorted(f.name for f in tmp_path.iterdir() if f.name != "cache") == ["calibrated.json"]
