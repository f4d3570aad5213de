"""Local networking helpers shared by the edges that start processes on this machine (the
validation server, the torch.distributed ranks of the probes). Standard library only."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on now (the OS picks it from its ephemeral range).
    The socket is closed before returning, so another process could take the port first: bind it
    soon, and treat a failure to bind as retryable."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
