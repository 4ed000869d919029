"""Loopback ports for tests: one that is free to listen on, and one that refuses connections.

A port handed out by `free_port` is released before the server the test starts takes it. Under pytest-xdist each
worker hands out ports from a block of its own below the kernel's ephemeral range (which bind(0) and every
outgoing connection draw from), so no other worker and no client connection can take the port meanwhile.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager

# Below Linux's default ephemeral range (32768-60999): a block of BLOCK ports per xdist worker, 17 workers at most.
FIRST_PORT, BLOCK = 15000, 1000


def _worker_block() -> range | None:
    """This xdist worker's ports (gw0 the first block), or None outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return None
    start = FIRST_PORT + int(worker[2:]) * BLOCK
    if start + BLOCK > 32768:
        raise RuntimeError(f"{worker}: too many xdist workers for the test port blocks (tests/ports.py)")
    return range(start, start + BLOCK)


_BLOCK = _worker_block()
# In turn through the block, from a random place: a port just released is the last one asked for again.
_NEXT = itertools.cycle(random.sample(list(_BLOCK), len(_BLOCK))) if _BLOCK else None


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port free at the moment of asking (bound, then released for a server to take)."""
    if _NEXT is not None:
        for _ in range(BLOCK):
            port = next(_NEXT)
            if _bindable(port):
                return port
        raise RuntimeError(f"no free port in {_BLOCK}")
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
