"""Capacity limits explained: a service at its maximum replicas while missing its SLO says so on its page and on
the fleet page, with its latest search's answer beside it, or a way to run one; and the lab page starts a search."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from apps.gateway.models import UsageRow
from apps.whatif.models import Run, RunStatus
from tests.factories import InferenceServiceFactory


def service_at(tenant, replicas: int, maximum: int):
    return InferenceServiceFactory(
        tenant=tenant, name="chat",
        pools=[{"role": "engine", "replicas": replicas, "min_replicas": 1, "max_replicas": maximum,
                "gpu_type": "l4-24gb"}],
        autoscaling={"autoscaler": "builtin", "targets": {"ttft_p95_seconds": 2}}, engine_settings={"max_model_len": 8192})


def slow_requests(service, n: int = 4) -> None:
    # 100-token prompts answered after 30 s: far over 2 s plus their prefill, so none meets the TTFT budget.
    for _ in range(n):
        UsageRow.objects.create(tenant=service.tenant, at=timezone.now(), service_id=service.pk, model="m",
                                status=200, ttft_ms=30_000, duration_ms=31_000, prompt_tokens=100,
                                completion_tokens=10)


def searched(service) -> Run:
    row = {"name": "2 × L4 (TP 1), 1–6 replicas", "gpu_hours": 3.1, "slo_attainment": 0.97,
           "itl_slo_attainment": 0.95, "changes": {"max_replicas": 6}}
    return Run.objects.create(service=service, search=True, cpu_budget_s=50, status=RunStatus.SUCCEEDED,
                              result={"chosen": row, "front": [row], "scenarios": [row], "reason": None,
                                      "current": {"name": "current", "slo_attainment": 0.004}})


def test_a_pool_at_its_maximum_missing_its_slo_says_so_with_the_searchs_answer(login, viewer_a, tenant_a):
    service = service_at(tenant_a, 3, 3)
    slow_requests(service)
    client = login(viewer_a)
    page = client.get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    assert ("At its maximum of 3 replicas and missing its SLO (TTFT met by 0.0% of requests, aim 95%): the maximum "
            "binds.") in page
    assert "Search for what would meet it" in page  # no search yet: the way to run one
    run = searched(service)
    page = client.get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    answer = ("at last hour&#x27;s load, 2 × L4 (TP 1), 1–6 replicas, meets 97.0% (ITL 95.0%) at 3.10 GPU-h; "
              "today&#x27;s configuration meets 0.4%")
    assert f"run #{run.pk}</a>): {answer}." in page
    assert "At last hour&#x27;s load, 2 × L4 (TP 1)" in page  # the advice card says it too
    fleet = client.get(reverse("web:home")).content.decode()
    assert "At its maximum of 3 replicas and missing its SLO" in fleet and f"Search: {answer}" in fleet


def test_a_pool_below_its_maximum_or_meeting_its_slo_says_nothing_of_limits(login, viewer_a, tenant_a):
    service = service_at(tenant_a, 2, 3)
    slow_requests(service)
    page = login(viewer_a).get(reverse("web:service", args=["alpha", "chat"])).content.decode()
    assert "the maximum binds" not in page and 'id="capacity-limit"' not in page


def test_the_lab_page_starts_a_search_and_a_bad_load_is_refused_beside_the_field(login, owner_a, tenant_a):
    service = service_at(tenant_a, 1, 1)
    client = login(owner_a)
    url = reverse("web:lab-search", args=["alpha", "chat"])
    refused = client.post(url, {"search-trace": "999"})
    assert refused.status_code == 422 and "Select a valid choice" in refused.content.decode()
    assert not Run.objects.filter(service=service).exists()
    # The recorded load of the last hour: no request recorded, so the search is refused naming the load.
    empty = client.post(url, {"search-trace": ""})
    assert empty.status_code == 422 and "no recorded load for alpha/chat" in empty.content.decode()
    slow_requests(service, 20)
    started = client.post(url, {"search-trace": ""})
    assert started.status_code == 302
    assert Run.objects.get(service=service).search is True
