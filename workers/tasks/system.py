"""Small housekeeping tasks, also used to prove a worker is alive."""

from celery import shared_task

from controlplane.tasknames import PING


@shared_task(name=PING)
def ping(value: str) -> str:
    """Echo `value` back; the integration tests use it to check a real worker and broker."""
    return f"pong:{value}"
