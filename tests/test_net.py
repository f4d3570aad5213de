"""kttune.net: the one free-port helper, with real sockets."""

from __future__ import annotations

import ast
import socket
from pathlib import Path

import pytest

from kttune.net import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_the_port_can_be_bound_and_listened_on():
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))  # raises if something holds it
        s.listen()


def test_a_port_someone_listens_on_is_never_handed_out():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        assert all(free_port() != taken for _ in range(50))


def test_the_host_is_the_one_bound():
    with pytest.raises(OSError):
        free_port("192.0.2.1")  # TEST-NET-1: no interface of this machine has it


def test_one_definition_serves_the_validation_server_and_the_probe_ranks():
    """The validation edge and the torch.distributed ranks take their port from kttune.net; no other
    module of the package defines its own copy."""
    from kttune.probes import ranks
    from kttune.validate import run

    assert ranks.free_port is free_port and run.free_port is free_port
    copies = [
        str(f.relative_to(ROOT))
        for d in ("kttune", "probes", "kernels")
        for f in (ROOT / d).rglob("*.py")
        if any(isinstance(n, ast.FunctionDef) and n.name == "free_port" for n in ast.walk(ast.parse(f.read_text())))
    ]
    assert copies == ["kttune/net.py"]
