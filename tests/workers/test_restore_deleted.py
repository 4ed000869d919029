"""An object of a service deleted by someone else comes back through the worker's watch, without a resync.

A real Celery worker (its own process, as deployed) against kubesim; no beat runs, so no periodic drift
check can be what restores the object: only the worker's watch seeing the deletion can."""

from __future__ import annotations

import pytest

from apps.serving.models import InferenceService, ReconcileRun
from apps.serving.names import SERVICE_UID_LABEL
from tests.factories import ClusterFactory, InferenceServiceFactory
from tests.polling import wait_for
from workers.tasks.reconcile import reconcile_service

pytestmark = pytest.mark.integration


def test_a_deleted_object_of_a_service_is_put_back_by_the_worker_that_watched_it(workers, make_cluster, tenant_a):
    handle = make_cluster()
    cluster = ClusterFactory(api_url=handle.url)
    service = InferenceServiceFactory(tenant=tenant_a, name="kept", cluster=cluster)
    workers(1)
    reconcile_service.delay(service.pk)
    wait_for(lambda: InferenceService.objects.get(pk=service.pk).phase == "Ready", timeout=90,
             message="the worker converges the service")
    wait_for(lambda: InferenceService.objects.get(pk=service.pk).queued_at is None, timeout=60,
             message="no pass queued or running")
    selector = f"{SERVICE_UID_LABEL}={service.uid}"
    [svc] = handle.core.list_namespaced_service("tenant-alpha", label_selector=selector).items
    passes = ReconcileRun.objects.filter(service=service).count()

    # Someone else deletes it (kubectl, say). The answer is a Status, which this client would read as a Service.
    handle.core.delete_namespaced_service(svc.metadata.name, "tenant-alpha", _preload_content=False)

    def back():
        items = handle.core.list_namespaced_service("tenant-alpha", label_selector=selector).items
        return [s.metadata.uid for s in items if s.metadata.name == svc.metadata.name]

    wait_for(lambda: back() and back()[0] != svc.metadata.uid, timeout=60, message="the Service is applied again")
    # The pass records its run when it ends, after the apply the cluster already shows. The watch may also
    # start passes for the other events of the deletion and the re-creation; those find everything as it is.
    def applied_since():
        runs = ReconcileRun.objects.filter(service=service).order_by("pk").values_list("applied", flat=True)
        return list(runs)[passes:]

    wait_for(lambda: any(applied_since()), timeout=30, message="the restoring pass is recorded")
    # Only the deleted object was applied again: the passes found the others as they were.
    assert sum(applied_since()) == 1, applied_since()
