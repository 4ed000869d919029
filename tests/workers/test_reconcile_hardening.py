"""Reconcile survives the unexpected, keeps its history bounded, and the resync never queues a service twice."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.catalog.models import Model
from apps.serving.choices import Phase, ReconcileResult
from apps.serving.dispatch import mark_queued
from apps.serving.models import InferenceService, ReconcileRun
from apps.serving.retention import prune_history
from tests.factories import ClusterFactory, InferenceServiceFactory
from workers.reconcile import due_for_resync, reconcile


def test_an_unexpected_exception_becomes_a_failed_condition_not_a_crash(db, make_cluster, tenant_a):
    handle = make_cluster()
    svc = InferenceServiceFactory(tenant=tenant_a, name="absurd", cluster=ClusterFactory(api_url=handle.url))
    # A stored number no form would accept: the weights' size overflows to infinity while rendering.
    Model.objects.filter(pk=svc.model_id).update(parameters_billions=1e308)

    outcome = reconcile(svc.pk)

    assert outcome.result == ReconcileResult.FAILED
    svc.refresh_from_db()
    assert svc.phase == Phase.FAILED
    reconciled = next(c for c in svc.conditions if c["type"] == "Reconciled")
    assert reconciled["status"] == "False" and reconciled["reason"] == "InternalError"
    assert "OverflowError" in reconciled["message"]
    assert ReconcileRun.objects.get(service=svc).result == ReconcileResult.FAILED
    assert outcome.requeue_after is None  # no retry loop: the next spec change (or resync) tries again


def test_reconcile_runs_past_retention_are_pruned_and_recent_ones_kept(db, settings):
    settings.RECONCILE_RUN_RETENTION_DAYS = 7
    svc = InferenceServiceFactory()
    now = timezone.now()
    for days in (0, 6, 8, 30):
        ReconcileRun.objects.create(service=svc, started_at=now - timedelta(days=days), generation=1,
                                    result=ReconcileResult.CONVERGED)
    counts = prune_history(now)
    assert counts["serving.ReconcileRun"] == 2
    kept = sorted((now - r.started_at).days for r in ReconcileRun.objects.all())
    assert kept == [0, 6]


def test_a_service_already_queued_is_not_queued_again(db, settings):
    settings.RECONCILE_QUEUED_EXPIRY_SECONDS = 120
    svc = InferenceServiceFactory()
    now = timezone.now()
    # Never reconciled, one interval after it was created (its own enqueue got lost): due.
    InferenceService.objects.filter(pk=svc.pk).update(created=now - timedelta(hours=1))
    assert list(due_for_resync(now).values_list("pk", flat=True)) == [svc.pk]
    assert mark_queued(svc.pk, now) is True
    assert mark_queued(svc.pk, now) is False  # a second enqueue of a queued service is refused
    assert not due_for_resync(now).exists()
    # A mark older than the expiry means the message was lost (broker restarted): queue again.
    later = now + timedelta(seconds=121)
    assert list(due_for_resync(later).values_list("pk", flat=True)) == [svc.pk]
    assert mark_queued(svc.pk, later) is True


@pytest.mark.integration
def test_resync_twice_in_a_row_enqueues_each_due_service_once(workers):
    from workers.tasks.reconcile import resync

    InferenceServiceFactory.create_batch(3)
    InferenceService.objects.update(created=timezone.now() - timedelta(hours=1))  # their enqueues got lost
    assert resync() == 3
    assert resync() == 0
    assert InferenceService.objects.filter(queued_at__isnull=False).count() == 3


def test_shared_objects_are_read_once_per_interval_not_on_every_pass(db, make_cluster, tenant_a, settings):
    """The tenant's Namespace, quota, NetworkPolicy and model volume are shared by all its services: a pass
    reads them only when this worker has not found them as desired within one resync interval."""
    from kubernetes import client as k8s

    from workers.kube import kube_for

    handle = make_cluster(fast_start=True)
    svc = InferenceServiceFactory(tenant=tenant_a, name="shared", cluster=ClusterFactory(api_url=handle.url))
    namespace = "tenant-alpha"
    settings.RECONCILE_RESYNC_SECONDS = 3600
    assert reconcile(svc.pk).applied > 0
    networking = k8s.NetworkingV1Api(handle.core.api_client)
    assert networking.read_namespaced_network_policy("tenant-isolation", namespace)

    networking.delete_namespaced_network_policy("tenant-isolation", namespace)
    kube = kube_for(svc.cluster)
    before = kube.requests
    reconcile(svc.pk)
    within_interval = kube.requests - before
    names = [p.metadata.name for p in networking.list_namespaced_network_policy(namespace).items]
    assert "tenant-isolation" not in names  # checked less than an interval ago: not read again

    settings.RECONCILE_RESYNC_SECONDS = 0  # the interval is over: the next pass reads and restores it
    before = kube.requests
    reconcile(svc.pk)
    assert networking.read_namespaced_network_policy("tenant-isolation", namespace)
    # Reading the four shared objects again (and re-applying the deleted one) cost at least five requests.
    assert kube.requests - before >= within_interval + 5


def test_a_look_at_a_rollout_that_has_not_moved_does_not_read_events_again(db, make_cluster, tenant_a, settings):
    """Events are read after a write and whenever a pod moved on; a look that finds the pods as the last
    one left them keeps the events it saw (a slow rollout is looked at many times)."""
    from kubernetes import client as k8s

    from apps.serving.models import ServiceObservation
    from tests.polling import wait_for
    from workers.kube import kube_for

    # The pods are read on the wire: a watch cache a moment behind the pod's start would let the second pass,
    # not the first, see it move.
    settings.KUBE_WATCH_CACHE = False

    handle = make_cluster(fast_start=False)  # the simulated engine loads its weights for a while
    svc = InferenceServiceFactory(tenant=tenant_a, name="slow", cluster=ClusterFactory(api_url=handle.url))
    assert reconcile(svc.pk).applied > 0
    core = k8s.CoreV1Api(handle.core.api_client)

    def running_not_ready():
        pods = core.list_namespaced_pod("tenant-alpha").items
        return pods and all(p.status.phase == "Running" and not all(c.ready for c in p.status.container_statuses or [])
                            for p in pods)

    wait_for(running_not_ready, timeout=60, message="the engine pod running, still loading")
    kube = kube_for(svc.cluster)
    before = kube.requests
    reconcile(svc.pk)  # the pod moved on (scheduled, started) since the first pass: events are read
    moved = kube.requests - before
    seen = ServiceObservation.objects.get(service_id=svc.pk).events
    before = kube.requests
    reconcile(svc.pk)  # nothing moved: the same lists, no event reads
    still = kube.requests - before
    assert running_not_ready(), "the engine became ready meanwhile; the second look had something new to see"
    # One event read per pod and per workload (one each here) were spared.
    assert moved - still == 2
    assert seen and ServiceObservation.objects.get(service_id=svc.pk).events == seen


def test_a_look_at_a_rollout_reads_the_workloads_but_a_changed_spec_gets_a_full_pass(db, make_cluster, tenant_a,
                                                                                        settings):
    """The passes that come back while a service deploys read its workloads and pods only; the other kinds
    are the previous pass's and the drift checks' business, unless the spec moved on meanwhile."""
    from kubernetes import client as k8s

    from workers.kube import kube_for

    # Which kinds a pass reads is counted on the wire: with the watch caches on, a pass's lists are answered
    # from memory (and an object deleted behind the worker's back is seen a moment later, when its event
    # arrives), so the counts would say nothing. tests/workers/test_watch_cache.py covers the caches.
    settings.KUBE_WATCH_CACHE = False

    handle = make_cluster(fast_start=True)
    svc = InferenceServiceFactory(tenant=tenant_a, name="looked", cluster=ClusterFactory(api_url=handle.url))
    assert reconcile(svc.pk).applied > 0
    policy = k8s.PolicyV1Api(handle.core.api_client)
    apps = k8s.AppsV1Api(handle.core.api_client)
    policy.delete_namespaced_pod_disruption_budget("looked", "tenant-alpha")
    apps.delete_namespaced_deployment("looked", "tenant-alpha")

    kube = kube_for(svc.cluster)
    before = kube.requests
    look = reconcile(svc.pk, look=True)
    look_requests = kube.requests - before
    assert look.applied == 1  # the Deployment, which the status is read from, is restored...
    assert apps.read_namespaced_deployment("looked", "tenant-alpha")
    assert not policy.list_namespaced_pod_disruption_budget("tenant-alpha").items  # ...the budget is not

    before = kube.requests
    full = reconcile(svc.pk)
    assert full.applied == 1 and policy.read_namespaced_pod_disruption_budget("looked", "tenant-alpha")
    assert kube.requests - before > look_requests  # it listed every kind the service owns

    # A spec change since the last pass turns a look into a full pass.
    InferenceService.objects.filter(pk=svc.pk).update(generation=svc.generation + 5)
    policy.delete_namespaced_pod_disruption_budget("looked", "tenant-alpha")
    assert reconcile(svc.pk, look=True).applied >= 1
    assert policy.read_namespaced_pod_disruption_budget("looked", "tenant-alpha")


def test_a_replica_ready_between_two_looks_has_its_start_up_read_from_its_events(db, make_cluster, tenant_a, settings):
    """A pod that started and became Ready between two passes moved on since the last look: its phase Events are
    read, so its start-up is recorded (the demo's replicas start that fast), and the next look reads nothing."""
    from kubernetes import client as k8s

    from apps.serving.models import ServiceObservation
    from tests.polling import wait_for

    settings.KUBE_WATCH_CACHE = False
    handle = make_cluster()  # fast start: the engine is Ready within a second
    svc = InferenceServiceFactory(tenant=tenant_a, name="quick", cluster=ClusterFactory(api_url=handle.url))
    assert reconcile(svc.pk).applied > 0
    core = k8s.CoreV1Api(handle.core.api_client)

    def ready_engine():
        pods = [p for p in core.list_namespaced_pod("tenant-alpha").items if "router" not in p.metadata.name]
        return pods and all(all(c.ready for c in p.status.container_statuses or []) for p in pods) and pods

    [pod] = wait_for(ready_engine, timeout=60, message="the engine pod ready")
    wait_for(lambda: any(e.reason == "EngineInitialized" for e in core.list_namespaced_event(
        "tenant-alpha", field_selector=f"involvedObject.name={pod.metadata.name}").items), message="its last phase")
    reconcile(svc.pk)
    [record] = ServiceObservation.objects.get(service_id=svc.pk).startups
    # Llama 3.1 8B (16.06 GB), nothing cached: downloaded at 200 MB/s in 80.3 s; vLLM initialises in 20 s.
    assert record["pod"] == pod.metadata.name and record["cache"] == "none"
    assert record["phases"]["download"] == 80.3 and record["phases"]["init"] == 20.0

    reconcile(svc.pk)  # nothing moved since: the record stays
    assert ServiceObservation.objects.get(service_id=svc.pk).startups == [record]
