"""The control plane's own admission on a cluster without Kueue: the shared policy (capacity.kueue.admit) over the
tenants' queues and their services' replicas, its outcome stored on each service in words, the replicas rendered
capped at those admitted, and an audit entry for every preemption. Figures worked by hand from Kueue's rules."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEntry
from apps.serving.admission import admit_cluster, admitted_replicas, gate
from apps.serving.models import InferenceService
from apps.serving.rendering.spec import spec_from_service
from apps.tenancy.models import TenantQueue
from tests.factories import ClusterFactory, InferenceServiceFactory, TenantFactory


@pytest.fixture
def west(db):
    """Two tenants with 2 L4 each in the cluster's cohort, lending all they do not use, borrowing without limit."""
    cluster = ClusterFactory(name="west")
    acme, globex = TenantFactory(slug="acme", gpu_quota=0), TenantFactory(slug="globex", gpu_quota=0)
    for tenant in (acme, globex):
        TenantQueue.objects.create(tenant=tenant, cluster=cluster, nominal={"l4-24gb": 2})
    return {"cluster": cluster, "acme": acme, "globex": globex}


def service(west, tenant, name, klass, replicas):
    return InferenceServiceFactory(tenant=west[tenant], name=name, cluster=west["cluster"], priority_class=klass,
                                   pools=[{"replicas": replicas, "max_replicas": 4, "gpu_type": "l4-24gb"}])


def stored(svc) -> dict:
    return InferenceService.objects.get(pk=svc.pk).admission


def test_unused_quota_is_lent_and_reclaimed_by_preempting_the_borrower(west, classes):
    batch = service(west, "acme", "batch-chat", classes["best-effort"], replicas=4)
    admit_cluster(west["cluster"])
    # acme holds its 2 L4 and borrows globex's 2 idle ones.
    assert stored(batch)["state"] == "admitted", stored(batch)
    assert stored(batch)["reason"] == "Admitted on borrowed quota (2 L4 from globex)"
    assert admitted_replicas(InferenceService.objects.get(pk=batch.pk)) == {"engine": 4}

    prod = service(west, "globex", "prod-chat", classes["production"], replicas=2)
    changed, _plan = admit_cluster(west["cluster"])
    # globex reclaims its nominal 2 L4: two of acme's borrowed replicas are preempted, none of its own 2.
    assert set(changed) == {batch.pk, prod.pk}
    assert admitted_replicas(InferenceService.objects.get(pk=prod.pk)) == {"engine": 2}
    assert stored(prod)["reason"] == "Admitted"
    assert admitted_replicas(InferenceService.objects.get(pk=batch.pk)) == {"engine": 2}
    assert stored(batch)["state"] == "preempted"
    assert stored(batch)["reason"].startswith(
        "Preempted by globex/prod-chat/engine-1 (production 1000 > best-effort 0) to reclaim globex's nominal quota at ")
    entries = AuditEntry.objects.filter(object_id=str(batch.pk), actor_repr="admission:controlplane")
    assert entries.count() == 2
    assert {e.after["preempted"] for e in entries} == {"acme/batch-chat/engine-2", "acme/batch-chat/engine-3"}
    assert {e.tenant_id for e in entries} == {west["acme"].pk}


def test_a_replica_that_does_not_fit_waits_and_is_not_rendered(west, classes):
    TenantQueue.objects.filter(tenant=west["acme"]).update(borrowing_limit={"l4-24gb": 1})
    chat = service(west, "acme", "chat", classes["best-effort"], replicas=3)
    service(west, "globex", "prod-chat", classes["production"], replicas=2)
    admit_cluster(west["cluster"])

    chat = InferenceService.objects.get(pk=chat.pk)
    assert chat.admission["state"] == "waiting"
    assert chat.admission["reason"].startswith("Waiting for quota: 1st in acme's queue; ")
    assert admitted_replicas(chat) == {"engine": 2}
    spec = gate(spec_from_service(chat), admitted_replicas(chat))
    assert [(p.role, p.replicas) for p in spec.pools] == [("engine", 2)]


def test_a_tenant_with_a_hard_quota_keeps_every_replica_it_had(db, classes):
    cluster = ClusterFactory(name="east")
    tenant = TenantFactory(slug="legacy", gpu_quota=8)  # as the migration turned an 8-GPU quota into a queue
    big = InferenceServiceFactory(tenant=tenant, name="big", cluster=cluster,
                                  pools=[{"replicas": 4, "max_replicas": 4, "gpus_per_replica": 2}])
    admit_cluster(cluster)
    big = InferenceService.objects.get(pk=big.pk)
    assert (big.admission["state"], big.admission["reason"], admitted_replicas(big)) == (
        "admitted", "Admitted", {"engine": 4})
