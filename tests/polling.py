"""Waiting on real components: poll until a condition holds, or fail the test saying what was awaited."""

from __future__ import annotations

import asyncio
import time

import pytest


def _check(predicate, deadline: float, message: str):
    """One poll: the predicate's truthy value, or None to poll again; fails the test past the deadline."""
    value = predicate()
    if value:
        return value
    if time.monotonic() >= deadline:
        pytest.fail(f"timed out waiting for {message} (last: {value!r})")
    return None


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.05, message: str = "condition"):
    """Poll `predicate` until it returns something truthy and return that; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while (value := _check(predicate, deadline, message)) is None:
        time.sleep(interval)
    return value


async def until(predicate, timeout: float = 15.0, interval: float = 0.005, message: str = "condition"):
    """`wait_for` for code on an event loop: poll `predicate` between awaits so the loop keeps serving."""
    deadline = time.monotonic() + timeout
    while (value := _check(predicate, deadline, message)) is None:
        await asyncio.sleep(interval)
    return value
