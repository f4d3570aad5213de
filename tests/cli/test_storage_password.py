"""Issue 24: kttune never prints a storage password. Each command that takes `--storage` (`search`
and `search --measure`) runs with a URL holding a marker password, against a closed port (with
the driver installed, with it missing, with a URL SQLAlchemy cannot parse) and against a real
PostgreSQL server that asks for that password (tests/postgres.py); the marker appears in none of
stdout, stderr, the report directory, the `--json` document, or any file the run leaves. Then
`kttune report`, which reopens the study named in a saved result, does the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kttune.cli import main
from kttune.net import free_port
from kttune.search.storage_url import PASSWORD_ENV, PASSWORD_FILE_ENV, shown, with_password
from tests.postgres import PASSWORD, postgres, postgres_db  # noqa: F401 -- fixtures

MARKER = "mArKeR-0d9a1c"  # a password that must never be shown
SEARCH = [
    "search",
    "-m",
    "qwen3-30b-a3b",
    "--vram",
    "32G",
    "--profile",
    "h200-pcie5-xeon-amx-16c",
    "-w",
    "long-context",
    "--seed",
    "2",
]
COMMANDS = {"search": ["--trials", "20"], "search --measure": ["--measure", "--evaluator", "model", "--trials", "4"]}


@pytest.fixture(autouse=True)
def _no_password_in_the_environment(monkeypatch):
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_FILE_ENV, raising=False)


def run(
    tmp_path: Path, capsys, monkeypatch, command: str, storage: str, *extra: str
) -> tuple[int, str, str, dict | None]:
    """Run the command in `tmp_path` with --json and --report; (exit code, stdout, stderr, JSON)."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    code = main(
        SEARCH + COMMANDS[command] + ["--storage", storage, "--json", "--report", str(tmp_path / "report"), *extra]
    )
    cap = capsys.readouterr()
    doc = json.loads(cap.out) if code == 0 else None
    return code, cap.out, cap.err, doc


def assert_nowhere(secret: str, tmp_path: Path, *texts: str, allowed: tuple[Path, ...] = ()) -> None:
    """`secret` is in none of `texts` nor in any file under `tmp_path` (the report directory, the
    cache dir, the working directory) except the `allowed` ones (a password file the test wrote)."""
    for t in texts:
        assert secret not in t
    for f in tmp_path.rglob("*"):
        if f.is_file() and f not in allowed:
            assert secret.encode() not in f.read_bytes(), f


# ---- no server: the connection fails ----------------------------------------------------------------


def _closed() -> int:
    return free_port()  # nothing listens there


CLOSED = {
    "driver installed, port closed": lambda: f"postgresql+psycopg://kttune:{MARKER}@127.0.0.1:{_closed()}/db",
    "driver missing": lambda: f"postgresql+pg8000://kttune:{MARKER}@127.0.0.1:{_closed()}/db",
    "a port that is not a number": lambda: f"postgresql+psycopg://kttune:{MARKER}@127.0.0.1:notaport/db",
    "password as a query parameter": lambda: f"postgresql+psycopg://kttune@127.0.0.1:{_closed()}/db?password={MARKER}",
    "quoted characters": lambda: f"postgresql+psycopg://kttune:{MARKER}%40x%2F@127.0.0.1:{_closed()}/db",
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", CLOSED)
def test_a_failed_connection_names_the_url_without_its_password(tmp_path, capsys, monkeypatch, command, case):
    code, out, err, _ = run(tmp_path, capsys, monkeypatch, command, CLOSED[case]())
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]  # under --json the header is on stderr
    assert code == 2 and out == "" and "Traceback" not in err
    assert "cannot open Optuna storage" in line and (":***@" in line or "password=***" in line)
    assert_nowhere(MARKER, tmp_path, out, err)


@pytest.mark.parametrize("source", ["env", "file"])
def test_the_password_may_come_from_the_environment_or_a_file(tmp_path, capsys, monkeypatch, source):
    """The error still names the URL with `***`: the password given is used, never shown."""
    url = f"postgresql+psycopg://kttune@127.0.0.1:{_closed()}/db"
    extra: tuple[str, ...] = ()
    if source == "env":
        monkeypatch.setenv(PASSWORD_ENV, MARKER)
    else:
        (tmp_path / "pw").write_text(MARKER + "\n")
        extra = ("--storage-password-file", str(tmp_path / "pw"))
    code, out, err, _ = run(tmp_path, capsys, monkeypatch, "search", url, *extra)
    assert code == 2 and "kttune:***@127.0.0.1" in err
    assert_nowhere(MARKER, tmp_path, out, err, allowed=(tmp_path / "pw",))


def test_a_password_in_the_url_and_a_password_file_are_refused_together(tmp_path, capsys, monkeypatch):
    (tmp_path / "pw").write_text("other\n")
    code, out, err, _ = run(
        tmp_path,
        capsys,
        monkeypatch,
        "search",
        CLOSED["driver missing"](),
        "--storage-password-file",
        str(tmp_path / "pw"),
    )
    assert code == 2 and "holds a password" in err
    assert_nowhere(MARKER, tmp_path, out, err)


@pytest.mark.parametrize(
    "url,expected",
    [
        ("postgresql://u:p%40ss@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("mysql+pymysql://u:secret@h/db?charset=utf8", "mysql+pymysql://u:***@h/db?charset=utf8"),
        ("postgresql://u@h/db?sslmode=require&password=secret", "postgresql://u@h/db?password=***&sslmode=require"),
        ("postgresql://u:se@cret@h:notaport/db", "postgresql://u:***@h:notaport/db"),
        ("sqlite:///x.db", "sqlite:///x.db"),
        ("runs/s.journal", "runs/s.journal"),
    ],
)
def test_shown_masks_as_sqlalchemy_renders_it(url, expected):
    assert shown(url) == expected


def test_a_url_as_kttune_shows_it_connects_again_with_the_password_from_the_environment(monkeypatch):
    monkeypatch.setenv(PASSWORD_ENV, "p@ss/word")
    assert with_password("postgresql://u:***@h/db") == "postgresql://u:p%40ss%2Fword@h/db"
    assert with_password("postgresql://u:own@h/db") == "postgresql://u:own@h/db"  # the URL's own wins
    monkeypatch.delenv(PASSWORD_ENV)
    assert with_password("postgresql://u:***@h/db") == "postgresql://u@h/db"  # *** is a mask, not a password


# ---- a real PostgreSQL server that asks for the password ----------------------------------------------


WAYS = [
    "in the URL",
    "from $KTTUNE_STORAGE_PASSWORD",
    "from --storage-password-file",
    "*** as kttune shows it, with $KTTUNE_STORAGE_PASSWORD",
]


@pytest.mark.parametrize("command,way", [("search", w) for w in WAYS] + [("search --measure", w) for w in WAYS[:2]])
def test_a_working_database_is_used_and_its_password_never_shown(
    postgres_db, tmp_path, capsys, monkeypatch, command, way
):
    """Every way of giving the password with `search`; `search --measure` (which runs the model
    search first, 300 trials on the server) with two of them."""
    server, db = postgres_db
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD + "\n")
    url = server.url(db, password=PASSWORD if way == WAYS[0] else "***" if way == WAYS[3] else None)
    if "$KTTUNE_STORAGE_PASSWORD" in way:
        monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    extra = ("--storage-password-file", str(pw)) if way == WAYS[2] else ()
    code, out, err, doc = run(tmp_path, capsys, monkeypatch, command, url, *extra)
    assert code == 0, err
    assert doc["study"]["storage"] == f"postgresql+psycopg://postgres:***@{server.host}:{server.port}/{db}"
    assert_nowhere(PASSWORD, tmp_path, out, err, allowed=(pw,))
    if command == "search":  # the report directory names the study and its storage, masked
        md = (tmp_path / "report" / "report.md").read_text()
        assert f"optuna-dashboard 'postgresql+psycopg://postgres:***@{server.host}" in md and "`***`" in md


def test_a_wrong_password_fails_in_one_line_without_showing_it(postgres_db, tmp_path, capsys, monkeypatch):
    server, db = postgres_db
    code, out, err, _ = run(tmp_path, capsys, monkeypatch, "search", server.url(db, password=MARKER))
    assert code == 2 and "password authentication failed" in err and "postgres:***@" in err
    assert_nowhere(MARKER, tmp_path, out, err)


def test_kttune_report_reopens_the_study_with_the_password_from_the_environment(
    postgres_db, tmp_path, capsys, monkeypatch
):
    """The saved result names the storage with `***`; `kttune report` (whose Pareto figure draws
    every trial of the study) connects with $KTTUNE_STORAGE_PASSWORD and shows it nowhere."""
    from kttune.emit.figures import study_trials

    server, db = postgres_db
    code, out, err, doc = run(tmp_path, capsys, monkeypatch, "search", server.url(db))
    assert code == 0, err
    assert study_trials(doc) is None  # no password at hand: the figure goes without the trials
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    assert len(study_trials(doc)) >= 1
    (tmp_path / "result.json").write_text(out)
    capsys.readouterr()
    assert main(["report", str(tmp_path / "result.json"), "--out", str(tmp_path / "again")]) == 0
    cap = capsys.readouterr()
    assert "***" in (tmp_path / "again" / "report.md").read_text()
    assert_nowhere(PASSWORD, tmp_path, cap.out, cap.err)
