"""A throwaway PostgreSQL server for the storage tests: Debian's `postgresql` package (server
binaries in /usr/lib/postgresql/<version>/bin) and the psycopg driver, started once per test
session in a temporary directory on a free port, with password login on TCP (scram-sha-256).

Where the server binaries or the driver are missing, the tests that need it are skipped, except
when `KTTUNE_REQUIRE_POSTGRES=1` (CI sets it: scripts/ci_postgres.sh installs both), where they
fail: a CI run must not go green by skipping the real database."""

from __future__ import annotations

import glob
import importlib.util
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from kttune.net import free_port

REQUIRE_ENV = "KTTUNE_REQUIRE_POSTGRES"
PASSWORD = "pgMarker-9f3c2a7e"  # the server's password: tests assert kttune never shows it
USER = "postgres"
_databases = itertools.count()


def server_bin() -> Path | None:
    """The directory holding initdb and pg_ctl: on PATH, else the newest Debian cluster version."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def unavailable() -> str | None:
    """Why no server can be started here; None when one can."""
    if server_bin() is None:
        return "PostgreSQL's server binaries are not installed (apt-get install postgresql)"
    if importlib.util.find_spec("psycopg") is None:
        return "the psycopg driver is not installed (pip install 'psycopg[binary]')"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, but there is no postgres user to run the server as"
    return None


def require() -> None:
    """Skip the calling test where no server can be started, or fail where CI requires one."""
    why = unavailable()
    if why is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {why}")
    pytest.skip(why)


@dataclass(frozen=True)
class Server:
    host: str
    port: int

    def url(self, database: str = "postgres", password: str | None = PASSWORD, driver: str = "psycopg") -> str:
        auth = f"{USER}:{password}" if password is not None else USER
        return f"postgresql+{driver}://{auth}@{self.host}:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database; its name."""
        import psycopg

        name = f"kttune_{os.getpid()}_{next(_databases)}"
        with psycopg.connect(
            host=self.host, port=self.port, user=USER, password=PASSWORD, dbname="postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name


def _as_postgres(cmd: list[str]) -> list[str]:
    return (["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []) + cmd


@pytest.fixture(scope="session")
def postgres():
    """The session's server (started on first use, stopped at the end)."""
    require()
    bindir = server_bin()
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="kttune-pg-"))  # under /tmp: pytest's tmp dirs are root-only
    data, pwfile = root / "data", root / "pw"
    data.mkdir()
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        for p in (root, data, pwfile):
            shutil.chown(p, "postgres")
    port = free_port()

    def run(*cmd: str) -> None:
        r = subprocess.run(_as_postgres([str(bindir / cmd[0]), *cmd[1:]]), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{cmd[0]} failed: {r.stdout}{r.stderr}"

    try:
        run(
            "initdb",
            "-D",
            str(data),
            "-U",
            USER,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
        )
        pwfile.unlink()
        run(
            "pg_ctl",
            "-D",
            str(data),
            "-w",
            "-t",
            "60",
            "-l",
            str(root / "server.log"),
            "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            "start",
        )
        yield Server("127.0.0.1", port)
    finally:
        subprocess.run(
            _as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
            timeout=120,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_db(postgres) -> tuple[Server, str]:
    """A fresh database on the session's server: (server, database name)."""
    return postgres, postgres.create_database()
