"""A task that takes a while, for the graceful-shutdown test; loaded into a test worker with `--include`."""

from __future__ import annotations

import time
from pathlib import Path

from celery import shared_task


@shared_task(name="tests.workers.slow_tasks.mark", acks_late=True)
def mark(directory: str, name: str, seconds: float) -> str:
    """Append `NAME started` to DIRECTORY/runs.log, work for `seconds`, append `NAME done`."""
    log = Path(directory) / "runs.log"
    with log.open("a") as out:
        out.write(f"{name} started\n")
    time.sleep(seconds)  # stands for a long reconcile pass
    with log.open("a") as out:
        out.write(f"{name} done\n")
    return name
