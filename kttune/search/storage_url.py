"""Storage URLs as kttune shows them: never with their password.

Every place a storage is named (errors, notes, the terminal report, `--json` `study.storage`, the
markdown report, figure footers, the optuna-dashboard hint) gets `shown(url)`: an RDB URL with its
password masked as SQLAlchemy's `URL.render_as_string(hide_password=True)` renders it (`***`), and a
`password=` query parameter masked the same way. Only the connection itself gets the real URL.

A password can stay out of the command line (and so out of shell history and `ps`):
`--storage-password-file FILE` (or `$KTTUNE_STORAGE_PASSWORD_FILE`): the file's first line;
`$KTTUNE_STORAGE_PASSWORD`: the password itself. Either fills an RDB URL given without a password,
or with `***` in its place, which is how kttune prints it, so a URL copied from a report or a
`--json` document connects again once the password is in the environment. A password typed in the
URL wins over the environment.

Every password kttune resolves is remembered for the life of the process, and `redact` blanks it
out of any text (a driver's error message, an unexpected exception) before it is printed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote, unquote

from kttune.errors import UserError

MASK = "***"  # what SQLAlchemy's render_as_string(hide_password=True) puts in the password's place
PASSWORD_ENV = "KTTUNE_STORAGE_PASSWORD"
PASSWORD_FILE_ENV = "KTTUNE_STORAGE_PASSWORD_FILE"
_QUERY_SECRET = re.compile(r"([?&](?:password|passwd)=)([^&#]*)", re.IGNORECASE)
_MIN_REDACTED_LEN = 3  # shorter "passwords" would blank ordinary characters out of every message
_secrets: set[str] = set()

STORAGE_PARAMS = ("storage", "storage_password_file")


def _error(problem: str, fix: str | None = None) -> UserError:
    """A storage error: its texts name `{storage}` and `{storage_password_file}` (kttune.errors)."""
    return UserError(problem, fix, params=STORAGE_PARAMS)


def is_url(storage: str) -> bool:
    return "://" in storage


def _remember(secret: str | None) -> None:
    if secret and secret != MASK:
        _secrets.update({secret, quote(secret, safe=""), unquote(secret)})


def forget_passwords() -> None:
    """Start a command with none remembered (a test process runs many commands: one command's
    password must not blank text out of the next one's messages)."""
    _secrets.clear()


def redact(text: str) -> str:
    """`text` with every password this process has seen replaced by `***` (longest first)."""
    for s in sorted(_secrets, key=len, reverse=True):
        if len(s) >= _MIN_REDACTED_LEN:
            text = text.replace(s, MASK)
    return text


def _mask_query(url: str) -> str:
    for m in _QUERY_SECRET.finditer(url):
        _remember(m.group(2))
    return _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, url)


def _mask_unparsed(url: str) -> str:
    """A URL SQLAlchemy cannot parse (a bad port, say): everything between the first ':' of the
    user part and the last '@' is masked. Masking too much is harmless; too little is not."""
    scheme, rest = url.split("://", 1)
    at = rest.rfind("@")
    if at < 0 or ":" not in rest[:at]:
        return url
    user = rest[:at].split(":", 1)[0]
    _remember(rest[len(user) + 1 : at])
    return f"{scheme}://{user}:{MASK}{rest[at:]}"


def shown(storage: str) -> str:
    """`storage` as kttune prints or writes it: a journal path as it is; an RDB URL with its
    password (and any `password=` query parameter) masked."""
    if not is_url(storage):
        return storage
    from sqlalchemy.engine import make_url

    try:
        u = make_url(storage)
    except Exception:  # noqa: BLE001 -- an unparsable URL is still shown, masked by hand
        return _mask_query(_mask_unparsed(storage))
    _remember(u.password if isinstance(u.password, str) else None)
    return _mask_query(u.render_as_string(hide_password=True))


def read_password_file(path: str, what: str = "{storage_password_file}") -> str:
    """The first line of `path` (its line ending dropped): a password kept out of shell history."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise _error(
            f"cannot read {what} {path} ({reason})",
            "pass a readable text file whose first line is the database password",
        ) from None
    line = text.split("\n", 1)[0].rstrip("\r")
    if not line:
        raise _error(
            f"{what} {path} is empty (its first line holds no password)",
            "write the database password on the file's first line",
        )
    _remember(line)
    return line


def with_password(storage: str, password_file: str | None = None) -> str:
    """The URL to connect with. An RDB URL without a password (or with `***` in its place) takes
    one from `password_file`, else `$KTTUNE_STORAGE_PASSWORD_FILE`, else `$KTTUNE_STORAGE_PASSWORD`;
    a password in the URL itself is kept. SQLite URLs and journal paths are returned as they are."""
    if not is_url(storage):
        if password_file:
            raise _error(
                "{storage_password_file} applies to a database URL, not a journal file",
                "drop {storage_password_file}, or pass {storage} postgresql://USER@HOST/DB",
            )
        return storage
    from sqlalchemy.engine import make_url

    try:
        u = make_url(storage)
    except Exception:  # noqa: BLE001 -- open_storage reports it (masked) when it tries to connect
        shown(storage)  # remembers the password it holds
        return storage
    if u.get_backend_name() == "sqlite":
        return storage
    own = u.password if isinstance(u.password, str) and u.password != MASK else None
    if own is not None:
        _remember(own)
        if password_file:
            raise _error(
                f"{{storage}} {shown(storage)} holds a password and {{storage_password_file}} gives another",
                "drop the password from the URL (it stays in shell history), keep the file",
            )
        return storage
    file = password_file or os.environ.get(PASSWORD_FILE_ENV) or None
    pw = (
        read_password_file(file, "{storage_password_file}" if password_file else f"${PASSWORD_FILE_ENV}")
        if file
        else os.environ.get(PASSWORD_ENV) or None
    )
    _remember(pw)
    if pw is None and u.password != MASK:
        return storage
    if pw is None:  # `***` with no password at hand: that is kttune's mask, not a password
        from sqlalchemy.engine import URL

        u = URL.create(u.drivername, u.username, None, u.host, u.port, u.database, u.query)
    else:
        u = u.set(password=pw)
    return u.render_as_string(hide_password=False)
