"""A task really travels through the broker to a separate worker process and its result comes back."""

import pytest

from workers.tasks.system import ping

pytestmark = pytest.mark.integration


def test_a_real_worker_answers_a_task_sent_through_the_broker(celery_worker_queue):
    result = ping.apply_async(args=["hello"], queue=celery_worker_queue)
    assert result.get(timeout=60) == "pong:hello"


def test_a_task_on_a_queue_no_worker_consumes_is_not_answered(celery_worker_queue):
    from celery.exceptions import TimeoutError as CeleryTimeout

    result = ping.apply_async(args=["lost"], queue=celery_worker_queue + "-nobody")
    with pytest.raises(CeleryTimeout):
        result.get(timeout=3)
