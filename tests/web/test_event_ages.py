"""Recent events as kubectl shows them: last seen (age), type, reason, object, message and count; ages in
kubectl's own spelling (apimachinery's HumanDuration)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.serving.models import ServiceObservation
from apps.web.templatetags.figures import age, human_duration
from tests.factories import InferenceServiceFactory


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (59, "59s"), (119, "119s"), (120, "2m"), (150, "2m30s"), (599, "9m59s"), (600, "10m"),
    (179 * 60, "179m"), (3 * 3600, "3h"), (3 * 3600 + 15 * 60, "3h15m"), (8 * 3600, "8h"), (47 * 3600, "47h"),
    (2 * 86400 + 5 * 3600, "2d5h"), (30 * 86400, "30d"), (800 * 86400, "2y70d"), (-5, "0s"),
])
def test_ages_read_as_kubectl_prints_them(seconds, text):
    assert human_duration(seconds) == text


def test_age_reads_the_iso_times_events_carry():
    now = timezone.now()
    assert age((now - timedelta(seconds=150)).isoformat().replace("+00:00", "Z"), now) == "2m30s"
    assert age("", now) == "–"


@pytest.mark.django_db
def test_the_service_page_lists_events_with_their_last_seen_age(login, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="chat")
    seen = timezone.now() - timedelta(minutes=15, seconds=30)
    ServiceObservation.objects.create(service=service, observed_at=timezone.now(), events=[
        {"type": "Normal", "reason": "Pulled", "object": "Pod/chat-abc-1", "count": 1,
         "message": 'Container image "vllm/vllm-openai:v0.33.0" already present on machine',
         "time": (timezone.now() - timedelta(hours=10, minutes=20)).isoformat()},
        {"type": "Warning", "reason": "BackOff", "object": "Pod/chat-abc-1", "count": 7,
         "message": "Back-off restarting failed container engine", "time": seen.isoformat()},
    ])
    html = login(viewer_a).get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    events = html[html.index("Recent events"):html.index("Reconcile history")]
    # Newest first: the back-off seen 15m30s ago (kubectl: "15m"), then the pull 10h20m ago ("10h").
    assert events.index("BackOff") < events.index("Pulled")
    assert f'<time datetime="{seen.isoformat()}" title="{seen.isoformat()}">15m</time>' in events
    assert ">10h</time>" in events
    assert "<td>7</td>" in events
    assert "<th data-cell=\"lead\">Last seen</th>" in events
