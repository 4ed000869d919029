"""Where a pool's maximum binds, the autoscaler's decision quotes what the what-if lab's search says would meet the
SLO (the lab hands its answer to the autoscaler, a layer below it: apps/autoscaling/binds.py)."""

from __future__ import annotations

from apps.autoscaling.evaluate import evaluate_service
from apps.autoscaling.models import ScalingDecision
from apps.whatif.models import Run, RunStatus
from tests.autoscaling.test_evaluate import pod_figures, service_with

ROW = {"name": "2 × L4 (TP 1), 1–6 replicas", "gpu_hours": 3.1, "slo_attainment": 0.97, "itl_slo_attainment": 0.95,
       "changes": {"max_replicas": 6}}


def searched(service, status=RunStatus.SUCCEEDED) -> Run:
    return Run.objects.create(service=service, search=True, cpu_budget_s=50, status=status,
                              result={"chosen": ROW, "front": [ROW], "scenarios": [ROW], "reason": None,
                                      "current": {"name": "current", "slo_attainment": 0.004}})


def binding(service) -> ScalingDecision:
    # 40 waiting on each of 2 replicas against a target of 4: ratio 10, ceil(10 × 2) = 20 asked; the default
    # scale-up allows max(2 × 2, 2 + 4) = 6, and the maximum of 4 binds.
    pod_figures(service, 40, 40)
    [outcome] = evaluate_service(service.pk)
    assert (outcome.action, outcome.current, outcome.desired) == ("scaled", 2, 4)
    return ScalingDecision.objects.get(service=service)


def test_a_binding_maximum_quotes_the_latest_search_of_the_lab(tenant_a, tenant_b):
    service = service_with(tenant_a, max_replicas=4)
    searched(service, RunStatus.FAILED)  # a failed search answers nothing
    run = searched(service)
    other = service_with(tenant_b, max_replicas=4)
    searched(other)  # another service's (and tenant's) search is never quoted
    decision = binding(service)
    assert decision.raw_recommendation == 20
    assert decision.reason.endswith(
        "the maximum binds: the rules ask 20 replicas for the SLO, the pool's maximum is 4; the what-if lab's search "
        f"(run #{run.pk}) answers: at last hour's load, 2 × L4 (TP 1), 1–6 replicas, meets 97.0% (ITL 95.0%) at "
        "3.10 GPU-h; today's configuration meets 0.4%")


def test_a_binding_maximum_without_a_search_says_how_to_run_one(tenant_a):
    service = service_with(tenant_a, max_replicas=4)
    decision = binding(service)
    assert decision.reason.endswith(
        "the pool's maximum is 4; the what-if lab has not searched this service yet (manage.py whatif --service "
        f"{service.tenant.slug}/{service.name} --search answers what would meet the SLO)")


def test_a_pool_within_its_maximum_quotes_no_search(tenant_a):
    service = service_with(tenant_a, max_replicas=8)
    searched(service)
    pod_figures(service, 12, 12)  # ratio 3: 6 asked, 6 allowed, under the maximum of 8
    [outcome] = evaluate_service(service.pk)
    assert outcome.desired == 6
    reason = ScalingDecision.objects.get(service=service).reason
    assert "maximum binds" not in reason and "what-if lab" not in reason
