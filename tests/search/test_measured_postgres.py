"""Two processes share one measured study through a real PostgreSQL server, Optuna's own way to
distribute a study over machines. Runs where PostgreSQL's server binaries, a `postgres` user and
psycopg are present (skipped in CI, which tests the same with a journal file)."""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import optuna
import pytest

from kttune.net import free_port
from tests.search.test_measured import run_two_workers_and_check


def _have_postgres() -> bool:
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return False
    return (os.geteuid() == 0 and shutil.which("initdb") is not None and shutil.which("pg_ctl") is not None
            and shutil.which("runuser") is not None and importlib.util.find_spec("psycopg") is not None)


pytestmark = pytest.mark.skipif(not _have_postgres(), reason="needs PostgreSQL server binaries, a postgres user and psycopg")


@pytest.fixture
def postgres_url():
    # a directory the postgres user can reach (pytest's tmp_path sits under a root-only directory)
    tmp_path = Path(tempfile.mkdtemp(prefix="kttune-pg-"))
    data = tmp_path / "pg"
    data.mkdir()
    shutil.chown(data, "postgres")
    shutil.chown(tmp_path, "postgres")
    port = free_port()
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(as_pg + ["initdb", "-D", str(data), "--auth=trust", "-U", "postgres"], check=True, capture_output=True)
    subprocess.run(as_pg + ["pg_ctl", "-D", str(data), "-w", "-l", str(tmp_path / "pg.log"), "-o",
                            f"-p {port} -k {tmp_path} -c listen_addresses=127.0.0.1", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(as_pg + ["pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_two_processes_share_one_study_on_postgres(postgres_url):
    run_two_workers_and_check(postgres_url, optuna.storages.RDBStorage(postgres_url))
