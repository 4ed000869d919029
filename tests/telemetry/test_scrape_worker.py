"""The telemetry tasks in a real Celery worker process on the broker: the scrape cycle (as beat sends it)
writes rows for a service on kubesim, and queue heartbeats record how long they waited."""

from __future__ import annotations

import pytest

from apps.telemetry.models import QueueHeartbeat, SeriesPoint
from controlplane.celery import app
from tests.polling import wait_for
from tests.workers.conftest import workers  # noqa: F401 (the real-worker fixture)
from workers.tasks import telemetry as tasks

pytestmark = pytest.mark.integration


def test_a_worker_runs_the_scrape_task_and_writes_the_services_rows(workers, deploy, tenant_a):  # noqa: F811
    service = deploy(tenant_a, "chat")
    workers(1)

    tasks.scrape.delay()
    tasks.scrape.delay()

    wait_for(lambda: SeriesPoint.objects.filter(service=service).count() >= 2, timeout=90, message="two rows")
    assert list(SeriesPoint.objects.filter(service=service).values_list("ready_replicas", flat=True)) == [2, 2]


def test_heartbeats_through_every_queue_record_their_wait(workers, settings):  # noqa: F811
    prefix = app.conf.task_default_queue.removesuffix("default")
    settings.CELERY_QUEUE_PREFIX = prefix
    workers(1)

    tasks.send_heartbeats()

    queues = {prefix + q for q in tasks.QUEUES}
    assert set(QueueHeartbeat.objects.values_list("queue", flat=True)) == queues
    wait_for(lambda: QueueHeartbeat.objects.filter(received_at__isnull=False).count() == len(queues),
             timeout=90, message="every heartbeat received")
    for beat in QueueHeartbeat.objects.all():
        # The wait includes the worker's start-up, so it is positive and under the test's own timeout.
        assert 0 < beat.lag_s < 90
        assert beat.lag_s == pytest.approx((beat.received_at - beat.sent_at).total_seconds())
