"""The command line's words turned into the typed values the facade takes: sizes in bytes,
durations in seconds, token lists, a storage URL with its password. Each function names what it
reads (`flag`) in its one-line error, and returns a plain value; the facade never sees "32G"."""

from __future__ import annotations

from typing import Iterable

from kttune import bounds
from kttune.errors import ParameterError, UserError
from kttune.units import parse_duration_s, parse_size_bytes


def vram_bytes(text: str, flag: str = "--vram") -> int:
    """`32G` -> bytes, no more than any GPU holds."""
    from kttune.app.inputs import check_vram_bytes

    return check_vram_bytes(parse_size_bytes(text, flag), shown=str(text))


def host_ram_bytes(text: str | None, flag: str = "--host-ram") -> int | None:
    """`512G` -> bytes, no more than any server holds; None stays None (the profile's)."""
    from kttune.app.inputs import check_host_ram_bytes

    return None if text is None else check_host_ram_bytes(parse_size_bytes(text, flag), shown=str(text))


def seconds(text: str | None, flag: str) -> float | None:
    """`10s`, `2m`, `1h30m` -> seconds; None stays None."""
    return None if text is None else parse_duration_s(text, flag)


def milliseconds(text: str | None, flag: str) -> float | None:
    """`150ms`, `0.2s` (a bare number is ms) -> milliseconds; None stays None."""
    return None if text is None else parse_duration_s(text, flag, bare_unit="ms") * 1e3


def chunks(text: str | None) -> tuple[int, ...]:
    """`8192,64k` -> (8192, 65536): token counts (`k` = 1024), checked by
    kttune.search.space.check_chunks; None -> () (the search's defaults)."""
    from kttune.search.space import check_chunks

    if text is None:
        return ()
    out = []
    for part in str(text).split(","):
        part = part.strip().lower().replace("_", "")
        if not part:
            continue
        mult = 1024 if part.endswith("k") else 1
        try:
            out.append(int(part[:-1] if mult > 1 else part) * mult)
        except ValueError:
            raise ParameterError(
                "chunks", f"value {part!r} is not a token count", "pass e.g. {chunks} 8192,65536"
            ) from None
    return check_chunks(out)


def token_list(values: Iterable[str] | None, flag: str, rule: bounds.Bound) -> tuple[int, ...]:
    """A comma-separated (or repeated) list option, each item a whole number under `rule`."""
    out = []
    for v in values or []:
        for part in str(v).split(","):
            if part.strip():
                try:
                    n = int(part)
                except ValueError:
                    raise UserError(f"{flag} {part!r} is not a whole number", f"pass e.g. {flag} 4096,16384") from None
                out.append(rule.check(n, flag))
    return tuple(out)


def words(values: Iterable[str] | None) -> tuple[str, ...]:
    """A comma-separated (or repeated) list option of words."""
    return tuple(x.strip() for v in values or [] for x in str(v).split(",") if x.strip())


def storage_url(storage: str | None, password_file: str | None) -> str | None:
    """The Optuna storage to open: `storage` with its database password from `password_file` (or
    the environment: kttune.search.storage_url.with_password); None: the default journal."""
    if storage or password_file is not None:
        from kttune.search.storage_url import with_password

        return with_password(storage or "", password_file) or None
    return storage
