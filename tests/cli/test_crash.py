"""Real `kttune` processes killed and resumed: SIGINT, SIGKILL, a torn journal, a stale Optuna
lock, two searches on one study; and the process-level output contract (--json stdout holds only
JSON even when native code prints at exit, a C locale, a 40-column terminal)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tests.helpers import interruptible, set_aside

KTTUNE = shutil.which("kttune", path=str(Path(sys.executable).parent)) or "kttune"
PROFILE = "datasheet-h200-pcie5-xeon-amx-16c"


def args(storage: Path, trials: int, *extra: str) -> list[str]:
    return [
        KTTUNE,
        "search",
        "--model",
        "qwen3-30b-a3b",
        "--vram",
        "32G",
        "--profile",
        PROFILE,
        "--trials",
        str(trials),
        "--storage",
        str(storage),
        "--seed",
        "3",
        *extra,
    ]


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # faulthandler: a process that hangs is sent SIGABRT and prints every thread's stack (`communicate`)
    e = dict(os.environ, KTTUNE_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="120", PYTHONFAULTHANDLER="1")
    e.update(extra)
    return e


def run(tmp_path, argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env(tmp_path, **kw), timeout=300)


def stored_complete(storage: Path) -> int:
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalStorage

    s = JournalStorage(JournalFileBackend(str(storage), lock_obj=JournalFileOpenLock(str(storage))))
    (summary,) = optuna.get_all_study_summaries(s)
    study = optuna.load_study(study_name=summary.study_name, storage=s)
    return len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))


def communicate(p: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """p.communicate, but a process still running after `timeout` s fails the test with its threads'
    stacks (faulthandler prints them on SIGABRT) instead of a bare TimeoutExpired."""
    try:
        return p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGABRT)
        _, err = p.communicate(timeout=30)
        pytest.fail(f"the process did not end within {timeout:g} s; its stacks:\n{err[-6000:]}")


def start_and_wait_for_trials(tmp_path, storage: Path, lines: int = 60) -> subprocess.Popen:
    p = subprocess.Popen(
        args(storage, 1_000_000),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(tmp_path),
        preexec_fn=interruptible,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if storage.exists() and storage.read_bytes().count(b"\n") >= lines:
            return p
        if p.poll() is not None:
            pytest.fail(f"search ended early: {p.stderr.read()}")
        time.sleep(0.05)
    p.kill()
    pytest.fail("the search wrote no trials")


def test_sigint_exits_130_and_the_rerun_resumes(tmp_path):
    j = tmp_path / "s.journal"
    p = start_and_wait_for_trials(tmp_path, j)
    p.send_signal(signal.SIGINT)
    _, err = communicate(p, 60)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err.strip().splitlines()[-1]
    have = stored_complete(j)
    assert have >= 50
    r = run(tmp_path, args(j, have + 15, "--json"))
    assert r.returncode == 0, r.stderr
    study = json.loads(r.stdout)["study"]
    assert study["trials"] == have + 15 and study["new_trials"] == 15


def test_sigkill_then_rerun_resumes_without_waiting_on_a_lock(tmp_path):
    j = tmp_path / "s.journal"
    p = start_and_wait_for_trials(tmp_path, j)
    p.kill()
    p.wait(timeout=30)
    # What Optuna's own symlink lock leaves when its holder is killed (kttune's flock cannot).
    lock = Path(str(j) + ".lock")
    os.symlink(j, lock)
    os.utime(lock, (time.time() - 60, time.time() - 60), follow_symlinks=False)
    have = stored_complete(j) if not j.read_bytes().endswith(b"}") else None
    r = run(tmp_path, args(j, 200 if have is None else have + 10, "--json"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert not os.path.lexists(lock)
    assert any("stale lock" in n for n in out["notes"]), out["notes"]
    assert out["study"]["trials"] == stored_complete(j)
    assert "Traceback" not in r.stderr and "Retrying" not in r.stderr


def test_torn_journal_is_cut_back_with_a_backup_and_resumes(tmp_path):
    j = tmp_path / "s.journal"
    assert run(tmp_path, args(j, 40)).returncode == 0
    data = j.read_bytes()
    j.write_bytes(data[:-100])  # a write cut off by a crash
    r = run(tmp_path, args(j, 60, "--json"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    note = next(n for n in out["notes"] if "set aside a torn last record" in n)
    intact = data[:-100][: data[:-100].rindex(b"\n") + 1]
    assert set_aside(note) == [(len(intact), data[len(intact) : -100])]  # exactly the torn bytes and their place, kept
    assert out["study"]["trials"] == 60 == stored_complete(j)
    # The old failure: a record glued onto the torn line, mid-file. The torn bytes are set aside,
    # the whole record after them kept, and the study resumes.
    good = j.read_bytes()
    j.write_bytes(good[:-100] + good[good.rindex(b"\n", 0, len(good) - 1) + 1 :])
    r = run(tmp_path, args(j, 70, "--json"))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert any("a torn record with a whole one appended to it" in n for n in out["notes"]), out["notes"]
    assert out["study"]["trials"] == 70 == stored_complete(j)


def test_two_searches_on_one_study_count_their_own_trials(tmp_path):
    j = tmp_path / "s.journal"
    procs = [
        subprocess.Popen(
            args(j, 300, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(tmp_path)
        )
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out)["study"])
    total = stored_complete(j)
    assert sum(o["new_trials"] for o in outs) == total  # each reports the trials IT added
    assert 300 <= total <= 301  # --trials is the study's total; one may race past it by one
    assert max(o["trials"] for o in outs) == total


def test_json_stdout_is_only_json_even_when_native_code_prints_at_exit(tmp_path):
    """kt-kernel's CPUInfer destructor writes `Goodbye` to file descriptor 1 at interpreter exit;
    an atexit write to fd 1 does the same here."""
    code = (
        "import atexit, os, sys; atexit.register(lambda: os.write(1, b'CPUInfer[0x1]: Goodbye\\n'));"
        "from kttune.cli import main; sys.argv = ['kttune'] + sys.argv[1:]; sys.exit(main())"
    )
    for cmd in (
        ["models", "--json"],
        ["workloads", "--json"],
        ["profiles", "--json"],
        [
            "search",
            "--model",
            "qwen3-30b-a3b",
            "--vram",
            "32G",
            "--profile",
            PROFILE,
            "--trials",
            "10",
            "--storage",
            str(tmp_path / "s.journal"),
            "--json",
        ],
    ):
        r = run(tmp_path, [sys.executable, "-c", code, *cmd])
        assert r.returncode == 0, r.stderr
        json.loads(r.stdout)
        assert "Goodbye" in r.stderr and "Goodbye" not in r.stdout


def test_c_locale_prints_without_crashing(tmp_path):
    r = run(tmp_path, args(tmp_path / "s.journal", 20), LC_ALL="C", LANG="C", PYTHONCOERCECLOCALE="0", PYTHONUTF8="0")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "launch command" in r.stdout


def test_launch_command_is_copyable_at_40_columns(tmp_path):
    r = run(tmp_path, args(tmp_path / "s.journal", 20, "--json"), COLUMNS="40")
    assert r.returncode == 0, r.stderr
    argv = json.loads(r.stdout)["command"]
    block = r.stderr.split("sglang-kt launch command", 1)[1].split("\n", 1)[1]  # the lines after its title
    lines = []
    for ln in block.splitlines():
        lines.append(ln)
        if not ln.endswith("\\"):
            break
    pasted = shlex.split(" ".join(ln.rstrip("\\") for ln in lines))
    assert pasted[-len(argv) :] == argv  # whole tokens, in order, after the environment assignments
    assert any(t.startswith("PYTORCH_ALLOC_CONF=expandable_segments:True") for t in pasted)
