"""The service page's pods: the reconciler's last observation, plus pods scraped since it looked (too new to
be in it), never a pod that was gone when it looked (its last figures wait for retention)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.serving.models import ServiceObservation
from apps.telemetry.models import PodStat
from apps.web.services import pod_rows
from tests.factories import InferenceServiceFactory


def test_pods_gone_before_the_last_observation_are_not_shown(db, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    looked = timezone.now() - timedelta(seconds=30)
    observation = ServiceObservation.objects.create(
        service=service, observed_at=looked,
        pods=[{"name": "chat-b", "role": "engine", "phase": "Running", "ready": True, "node": "n1"}])
    for pod, scraped in (("chat-a", looked - timedelta(seconds=5)),  # rolled away before the look
                         ("chat-b", looked + timedelta(seconds=1)),  # observed, and scraped since
                         ("chat-c", looked + timedelta(seconds=2))):  # started after the look
        PodStat.objects.create(service=service, pod=pod, role="engine", node="n1", scraped_at=scraped,
                               figures={"running": 1})

    rows = pod_rows(service, observation)

    assert [r["name"] for r in rows] == ["chat-b", "chat-c"]
    assert rows[0]["stat"].pod == "chat-b" and rows[1]["phase"] == "Running"
