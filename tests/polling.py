"""Waiting on real components: poll until a condition holds, or fail the test saying what was awaited."""

from __future__ import annotations

import asyncio
import time

import pytest


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.05, message: str = "condition"):
    """Poll `predicate` until it returns something truthy and return that; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out waiting for {message} (last: {last!r})")


async def until(predicate, timeout: float = 15.0, interval: float = 0.005, message: str = "condition"):
    """`wait_for` for code on an event loop: poll `predicate` between awaits so the loop keeps serving."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        await asyncio.sleep(interval)
    pytest.fail(f"timed out waiting for {message} (last: {last!r})")
