"""Celery task of the rollout controller: every ROLLOUT_SECONDS beat judges each running rollout that is due
(apps/rollouts/controller.py). It runs on the default queue."""

from __future__ import annotations

from celery import shared_task

from apps.rollouts import controller
from controlplane import tasknames as names


@shared_task(name=names.ROLLOUT_STEP_ALL, ignore_result=True)
def step_all() -> int:
    return controller.step_all()
