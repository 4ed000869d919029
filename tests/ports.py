"""Loopback ports for tests: one that is free to listen on, and one that refuses connections."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A loopback port free at the moment of asking (bound, then released for a server to take)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on, for the block: bound and never listening, so a connection is
    refused and no other server can take the port meanwhile (a released port can be, mid-test)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]
