#!/usr/bin/env bash
# PostgreSQL for the storage tests, idempotently: Debian's server package and the psycopg driver.
# The tests start their own server from these binaries (tests/postgres.py: a throwaway cluster on a
# free port, as the postgres user when run as root) and stop it at the end of the session. With
# KTTUNE_REQUIRE_POSTGRES=1 (set by .ci/run) a missing server or driver fails those tests instead
# of skipping them. Run by .ci/run after scripts/setup.sh, with the same Python ($PYTHON).
set -euo pipefail
PY=${PYTHON:-python3}
have_server() { compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || command -v pg_ctl >/dev/null; }
if ! have_server || ! id postgres >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "ci_postgres: PostgreSQL is not installed and this is not root: apt-get install postgresql" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d: the package's own cluster is not started (the tests start theirs on a free port);
  # one the machine already has is left as it is
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get install -y -qq postgresql >/dev/null
fi
have_server || { echo "ci_postgres: no pg_ctl after installing postgresql" >&2; exit 1; }
"$PY" -c "import psycopg" 2>/dev/null \
  || "$PY" -m pip install -q --disable-pip-version-check "psycopg[binary]"
"$PY" -c "import psycopg; print('ci_postgres: PostgreSQL', '$(ls /usr/lib/postgresql 2>/dev/null | sort -n | tail -1)', 'and psycopg', psycopg.__version__, 'ready')"
