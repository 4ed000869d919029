"""The what-if lab's task: one stored run replayed off the web process (queue `default`)."""

from __future__ import annotations

from celery import shared_task

from apps.whatif.runs import execute
from controlplane import tasknames as names


@shared_task(name=names.WHATIF_RUN, ignore_result=True, acks_late=False)
def run(run_id: int) -> str | None:
    """Replay the run's load against its scenarios; its row carries progress, status and the result. Not
    acknowledged late: a run lost with its worker is not replayed from the start by another (it stays
    `running`; start it again)."""
    return execute(run_id)
