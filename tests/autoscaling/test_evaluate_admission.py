"""The autoscaler's decisions on a cluster without Kueue say when a scale-up's new replicas wait for quota, or
took GPUs from another tenant's borrowed, lower-priority replicas (the admission pass runs with the scale)."""

from __future__ import annotations

import pytest

from apps.autoscaling.evaluate import evaluate_service
from apps.autoscaling.models import ScalingDecision
from apps.serving.admission import admit_cluster
from apps.serving.models import InferenceService
from apps.tenancy.models import PriorityClass, TenantQueue
from tests.autoscaling.test_evaluate import BUILTIN, pod_figures
from tests.factories import ClusterFactory, InferenceServiceFactory, TenantFactory


@pytest.fixture
def west(db):
    """acme and globex with 4 L4 each in the cluster's cohort; acme's best-effort batch borrows globex's 4."""
    cluster = ClusterFactory(name="west")
    production, _ = PriorityClass.objects.get_or_create(name="production", defaults={"value": 1000})
    best_effort, _ = PriorityClass.objects.get_or_create(name="best-effort", defaults={"value": 0})
    acme, globex = TenantFactory(slug="acme", gpu_quota=0), TenantFactory(slug="globex", gpu_quota=0)
    for tenant in (acme, globex):
        TenantQueue.objects.create(tenant=tenant, cluster=cluster, nominal={"l4-24gb": 4})
    batch = InferenceServiceFactory(tenant=acme, name="batch", cluster=cluster, priority_class=best_effort,
                                    pools=[{"replicas": 8, "max_replicas": 8, "gpu_type": "l4-24gb"}])
    chat = InferenceServiceFactory(tenant=globex, name="chat", cluster=cluster, priority_class=production,
                                   autoscaling=dict(BUILTIN),
                                   pools=[{"replicas": 2, "min_replicas": 1, "max_replicas": 8,
                                           "gpu_type": "l4-24gb"}])
    return {"cluster": cluster, "batch": batch, "chat": chat, "acme": acme, "globex": globex}


def test_a_scale_up_that_reclaims_lent_quota_says_whom_it_preempted(west):
    TenantQueue.objects.filter(tenant=west["globex"]).update(nominal={"l4-24gb": 6})
    admit_cluster(west["cluster"])  # chat holds 2 of globex's 6 L4; batch holds acme's 4 and borrows the other 4
    assert InferenceService.objects.get(pk=west["batch"].pk).admission["replicas"] == {"engine": 8}
    pod_figures(west["chat"], 8, 8)
    evaluate_service(west["chat"].pk)
    decision = ScalingDecision.objects.get(service=west["chat"])
    # waiting 8 per replica vs 4 → 4 replicas; globex takes 2 lent L4 back: batch's two most recent replicas go.
    assert (decision.action, decision.desired_replicas) == ("scaled", 4)
    assert "preempted acme/batch/engine-6 (preempted by globex/chat/engine-" in decision.reason
    assert "preempted acme/batch/engine-7 (preempted by globex/chat/engine-" in decision.reason
    assert "(production 1000 > best-effort 0) to reclaim globex's nominal quota" in decision.reason
    assert InferenceService.objects.get(pk=west["batch"].pk).admission["replicas"] == {"engine": 6}


def test_a_scale_up_beyond_what_the_cohort_can_lend_says_its_replicas_wait(west):
    TenantQueue.objects.filter(tenant=west["globex"]).update(nominal={"l4-24gb": 2})
    admit_cluster(west["cluster"])  # chat holds globex's 2 L4, batch acme's 4: nothing is lent or free
    # The queue's bound allows 4 (2 nominal + 4 acme may lend), but acme uses them, within its own quota.
    pod_figures(west["chat"], 8, 8)
    evaluate_service(west["chat"].pk)
    decision = ScalingDecision.objects.get(service=west["chat"])
    assert (decision.action, decision.desired_replicas) == ("scaled", 4)
    assert "2 of the new replicas wait for quota: 1st in globex's queue; " in decision.reason
    assert decision.signals["admission"].startswith("2 of the new replicas wait for quota")
