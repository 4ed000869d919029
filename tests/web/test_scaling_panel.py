"""The Scaling panel and the fleet's latest decisions as server-rendered partials: folding of held
decisions, live HPA status, markers for the replica chart, and tenant scoping."""

from __future__ import annotations

import json
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from apps.autoscaling.evaluate import pool_rates
from apps.autoscaling.models import PoolAutoscalerState, ScalingDecision
from apps.gateway.models import UsageRow
from apps.serving.models import ServiceObservation
from tests.factories import InferenceServiceFactory

BUILTIN = {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}}


def decide(service, seconds_ago, action="scaled", current=1, desired=2, reason="waiting 9 per replica > target 4"):
    return ScalingDecision.objects.create(
        service=service, pool="engine", time=timezone.now() - timedelta(seconds=seconds_ago),
        current_replicas=current, desired_replicas=desired, raw_recommendation=desired, stabilized=desired,
        limited=desired, rule="metric" if action != "held" else "ScaleDownStabilized", action=action, reason=reason)


def test_consecutive_held_decisions_fold_into_one_line_with_a_count(login, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, autoscaling=BUILTIN)
    decide(service, 100)
    for seconds in (60, 45, 30):
        decide(service, seconds, action="held", current=2, desired=2, reason="held at 2 (highest recommendation)")
    decide(service, 10, current=2, desired=1, reason="all metrics below target")
    PoolAutoscalerState.objects.create(service=service, pool="engine", evaluations=40, unchanged=35, cold_start_s=12.5)
    html = login(viewer_a).get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    assert html.count('class="decision') == 3  # scaled, one folded held line, scaled
    assert "held ×3" in html and "all metrics below target" in html
    assert "<td>40</td><td>35</td>" in html and "12.5 s" in html
    markers = json.loads(html.split('id="scaling-markers" type="application/json">')[1].split("</script>")[0])
    assert [(m["replicas"], m["action"]) for m in markers] == [(2, "scaled"), (1, "scaled")]


def test_the_service_page_includes_the_panel(login, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, autoscaling=BUILTIN)
    decide(service, 5, reason="waiting 14.2 per replica > target 4 (×3.55) → 4 replicas")
    html = login(viewer_a).get(reverse("web:service", args=[service.tenant.slug, service.name])).content.decode()
    assert 'id="scaling"' in html and "waiting 14.2 per replica &gt; target 4 (×3.55) → 4 replicas" in html


def test_live_hpa_status_read_back_from_the_cluster_is_shown(login, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, autoscaling={"autoscaler": "hpa", "targets": {
        "waiting_requests_per_replica": 4}})
    ServiceObservation.objects.create(service=service, autoscalers=[{
        "kind": "HorizontalPodAutoscaler", "name": service.name, "target": service.name, "min": 1, "max": 4,
        "current": 2, "desired": 3, "last_scale": None, "metrics": ["vllm_num_requests_waiting: 9"],
        "conditions": [{"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange",
                        "message": "the desired count is within the acceptable range"}]}])
    html = login(viewer_a).get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    assert f"HorizontalPodAutoscaler/{service.name}</td><td>2</td><td>3</td>" in html
    assert "ScalingLimited=False</span> DesiredWithinRange" in html


def test_another_tenants_panel_is_404_and_its_decisions_stay_off_the_fleet_page(login, member_b, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, name="secret-chat", autoscaling=BUILTIN)
    decide(service, 5)
    client = login(member_b)
    assert client.get(reverse("web:scaling-panel", args=[service.pk])).status_code == 404
    assert "secret-chat" not in client.get(reverse("web:fleet-decisions")).content.decode()


def test_the_fleet_lists_the_latest_decisions_across_services(login, staff, tenant_a, tenant_b):
    a = InferenceServiceFactory(tenant=tenant_a, name="alpha-chat", autoscaling=BUILTIN)
    b = InferenceServiceFactory(tenant=tenant_b, name="bravo-chat", autoscaling=BUILTIN)
    decide(a, 30, reason="older")
    decide(b, 5, reason="newer")
    decide(b, 1, action="held", current=2, desired=2, reason="held ones are not listed")
    html = login(staff).get(reverse("web:fleet-decisions")).content.decode()
    assert html.index("bravo/bravo-chat") < html.index("alpha/alpha-chat")
    assert "held ones are not listed" not in html


def test_a_scale_up_capped_at_max_is_labelled_as_what_happened(login, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, autoscaling=BUILTIN)
    decision = decide(service, 5, current=2, desired=5, reason="waiting 40.0 per replica > target 4 (×10.0) → 5 replicas")
    ScalingDecision.objects.filter(pk=decision.pk).update(rule="TooManyReplicas")
    html = login(viewer_a).get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    assert "[Capped at the pool&#x27;s maximum replicas]" in html
    assert "[Maximum replicas]" not in html


def test_the_panel_says_which_ttft_is_judged_and_shows_the_load_forecast(login, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, autoscaling=BUILTIN)
    decide(service, 5)
    PoolAutoscalerState.objects.create(service=service, pool="engine", history={"forecast": {
        "level": 1527.0, "trend": 135.9, "trusted": True}})
    html = login(viewer_a).get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    assert "TTFT judged as" in html and "absolute p95 (no prefill floor measured)" in html
    assert "1527 prompt tokens/s, +136 per evaluation; steering" in html
    # A decision judged on the budget, and a forecast that was wrong by 2,000 of 3,000:
    ScalingDecision.objects.filter(service=service).update(signals={"ttft_definition": "budget"})
    PoolAutoscalerState.objects.filter(service=service).update(history={"forecast": {
        "level": 2000.0, "trend": 300.0, "trusted": False, "error": 2000 / 3000}})
    html = login(viewer_a).get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    assert "budget: the part above the prompts&#x27; own prefill time" in html
    assert "2000 prompt tokens/s, +300 per evaluation; ignored: off by 67%" in html


def test_the_forecast_band_of_each_pool_goes_to_the_replica_chart(login, viewer_a, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, autoscaling=BUILTIN)
    due = timezone.now().replace(microsecond=0) + timedelta(seconds=40)
    PoolAutoscalerState.objects.create(service=service, pool="engine", history={"forecast": {
        "level": 5200.0, "trend": 150.0, "band": [[due.timestamp() - 15, 2, 3, 4, True],
                                                   [due.timestamp(), 2, 4, 6, False]]}})
    html = login(viewer_a).get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    [pool] = json.loads(html.split('id="scaling-forecast" type="application/json">')[1].split("</script>")[0])
    assert pool["pool"] == "engine"
    assert [(p["low"], p["replicas"], p["high"], p["trusted"]) for p in pool["points"]] == [
        (2, 3, 4, True), (2, 4, 6, False)]
    assert pool["points"][-1]["time"] == due.isoformat().replace("+00:00", "Z")


def test_the_panel_reports_the_last_hours_slo_attainment_per_request_with_the_budget_in_force(login, viewer_a,
                                                                                              tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a, autoscaling={"autoscaler": "builtin", "targets": {
        "waiting_requests_per_replica": 4, "ttft_p95_seconds": 2, "itl_p95_seconds": 0.1}})
    rate = pool_rates(service, service.pools.get()).prefill_tokens_per_s  # the H100's, from the capacity planner
    now = timezone.now()

    def row(ttft_ms, prompt, completion, duration_ms, cached=0, status=200, ago=60, sid=None):
        UsageRow.objects.create(tenant=tenant_a, at=now - timedelta(seconds=ago), service_id=sid or service.pk,
                                model="m", status=status, ttft_ms=ttft_ms, duration_ms=duration_ms,
                                prompt_tokens=prompt, cached_tokens=cached, completion_tokens=completion)

    # 1: 1,000 uncached tokens, TTFT 10 ms under 2 s + their prefill: within the budget, not within 2 s; 10
    #    gaps of 90 ms: ITL within 0.1 s.
    first = 2000 + 1000 / rate * 1000 - 10
    row(first, 1000, 11, first + 10 * 90)
    # 2: TTFT 0.5 s, within both; 10 gaps of 120 ms: ITL missed.
    row(500, 100, 11, 500 + 10 * 120)
    # 3: 4,000 tokens all cached (no prefill of its own), TTFT 2.1 s: neither; one output token: no ITL.
    row(2100, 4000, 1, 2100, cached=4000)
    # Not counted: a 429, a row two hours old, another service's.
    row(5, 10, 2, 10, status=429)
    row(9000, 10, 2, 9000, ago=7200)
    row(9000, 10, 2, 9000, sid=service.pk + 1000)
    html = login(viewer_a).get(reverse("web:scaling-panel", args=[service.pk])).content.decode()
    # 3 requests: budget 2 of 3, 2 s 1 of 3; ITL 1 of the 2 with two or more tokens.
    assert ('SLO attainment, last hour at the gateway (3 requests): TTFT within the budget (2 s + the prompt&#x27;s '
            "own prefill; in force) 66.7%; TTFT within 2 s 33.3%; ITL within 0.1 s 50.0%") in html
    # The fleet page says the same in its services table, one grouped query for every service listed.
    fleet = login(viewer_a).get(reverse("web:home")).content.decode()
    assert '<td class="small">TTFT 66.7% (budget), ITL 50.0% of 3</td>' in fleet


def test_the_fleet_lists_each_services_attainment_by_its_own_objectives_and_no_other_tenants(login, viewer_a,
                                                                                          tenant_a, tenant_b):
    # Two services answering alike (TTFT 1.5 s, 4 tokens 0.2 s apart): one judged against 1 s (missed), the
    # other against 2 s (met). Another tenant's service is not listed.
    strict = InferenceServiceFactory(tenant=tenant_a, name="strict", autoscaling={"autoscaler": "builtin",
                                                                                 "targets": {"ttft_p95_seconds": 1}})
    lax = InferenceServiceFactory(tenant=tenant_a, name="lax", autoscaling=BUILTIN)
    other = InferenceServiceFactory(tenant=tenant_b, name="elsewhere", autoscaling=BUILTIN)
    for service in (strict, lax, other):
        UsageRow.objects.create(tenant=service.tenant, at=timezone.now(), service_id=service.pk, model="m",
                                status=200, ttft_ms=1500, duration_ms=2100, prompt_tokens=0, completion_tokens=4)
    fleet = login(viewer_a).get(reverse("web:home")).content.decode()
    assert "elsewhere" not in fleet
    assert fleet.count('<td class="small">TTFT 0.0% (budget) of 1</td>') == 1
    assert fleet.count('<td class="small">TTFT 100.0% (budget) of 1</td>') == 1
