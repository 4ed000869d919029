"""The what-if lab's tasks (queue `whatif`, served by its own worker in `make demo`): one stored run replayed off
the web process, and the periodic refresh of tuning advice."""

from __future__ import annotations

import logging

from celery import shared_task

from apps.whatif.advice import advised_services, refresh_advice
from apps.whatif.runs import execute, fail_lost_runs
from controlplane import tasknames as names

log = logging.getLogger(__name__)


@shared_task(name=names.WHATIF_RUN, ignore_result=True, acks_late=False)
def run(run_id: int) -> str | None:
    """Replay the run's load against its scenarios; its row carries progress, status and the result. Not
    acknowledged late: a run lost with its worker is not replayed from the start by another; the advice beat
    marks it failed once it is long overdue (`fail_lost_runs`), and it can be started again."""
    return execute(run_id)


@shared_task(name=names.WHATIF_ADVISE, ignore_result=True)
def advise() -> int:
    """Refresh the tuning advice of every service with recorded load; one service's failure does not stop the
    others. First, runs whose worker died are marked failed."""
    if lost := fail_lost_runs():
        log.warning("%d what-if runs lost with their worker marked failed", lost)
    count = 0
    for service in advised_services():
        try:
            refresh_advice(service)
        except Exception:
            log.exception("advice for service %s failed", service.pk)
        count += 1
    return count
