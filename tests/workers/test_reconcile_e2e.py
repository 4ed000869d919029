"""End to end: the REST API → the database → a real Celery worker → kubesim over HTTP, and back.

Every test talks to a kubesim process with the official client (no mocks) and waits by polling.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest
from kubernetes import client as k8s
from rest_framework.test import APIClient

from apps.serving.models import InferenceService, ReconcileRun
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory, TenantFactory, UserFactory
from tests.polling import wait_for as poll

pytestmark = pytest.mark.integration
LABEL = "controlplane.io/service-uid"


def wait_for(predicate, timeout=120.0, interval=0.3, what="condition"):
    """Poll with deadlines generous enough for a loaded 2-core machine."""
    return poll(predicate, timeout=timeout, interval=interval, message=what)


def resyncing(check, every: float = 2.0):
    """`check`, to poll as often as `wait_for` does, enqueueing a resync (what beat does every few seconds: pick up
    anything behind) at most every `every` seconds, so the wait ends as soon as the check holds."""
    from workers.tasks.reconcile import resync

    last = -every

    def poll():
        nonlocal last
        if time.monotonic() - last >= every:
            resync.delay()
            last = time.monotonic()
        return check()

    return poll


def _advisory_lock_held(key1: int, key2: int) -> bool:
    """Whether some session holds the two-key advisory lock (pg_locks: classid, objid, objsubid 2) in this
    database (advisory locks are per database; another test database, as another xdist worker's, has its own)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s "
                       "AND objsubid = 2 AND granted "
                       "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())", [key1, key2])
        return cursor.fetchone() is not None


@pytest.fixture
def stack(kubesim_url, workers):
    """A staff API client, a tenant, a catalog and a cluster row pointing at the kubesim process."""
    tenant = TenantFactory(slug="acme", gpu_quota=16)
    cluster = ClusterFactory(name="sim", api_url=kubesim_url, insecure_simulator=True)
    model = ModelFactory(name="llama-3-1-8b")
    runtime = RuntimeFactory(name="vllm", tag="v0.33.0")
    api = APIClient()
    api.force_authenticate(UserFactory(username="root", is_staff=True, is_superuser=True))
    cfg = k8s.Configuration()
    cfg.host = kubesim_url
    kube = k8s.ApiClient(cfg)
    return {"api": api, "tenant": tenant, "cluster": cluster, "model": model, "runtime": runtime,
            "apps": k8s.AppsV1Api(kube), "core": k8s.CoreV1Api(kube), "workers": workers, "url": kubesim_url}


def create_service(stack, name="chat", replicas=1, gpus=1, gpu_type="h100-sxm-80gb", **extra):
    body = {
        "tenant": "acme", "name": name, "cluster": "sim", "model": stack["model"].pk, "runtime": stack["runtime"].pk,
        "deployment_mode": "standard", "engine_settings": {"max_model_len": 8192}, "routing_policy": "round_robin",
        "pools": [{"role": "engine", "replicas": replicas, "min_replicas": 1, "max_replicas": 4,
                   "gpus_per_replica": gpus, "gpu_type": gpu_type, "nodes_per_replica": 1}],
        **extra,
    }
    response = stack["api"].post("/api/v1/services/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def service(pk) -> InferenceService:
    return InferenceService.objects.get(pk=pk)


def engine_pods(stack, uid):
    pods = stack["core"].list_namespaced_pod("tenant-acme", label_selector=f"{LABEL}={uid}").items
    return [p for p in pods if p.metadata.labels.get("app.kubernetes.io/component") == "engine"]


def test_a_service_created_through_the_api_becomes_ready_scales_rolls_and_is_deleted(stack):
    stack["workers"](1)
    created = create_service(stack)
    pk, uid = created["id"], created["uid"]

    wait_for(lambda: service(pk).phase == "Ready", what="phase Ready")
    svc = service(pk)
    assert svc.observed_generation == svc.generation
    assert svc.ready_replicas == 1
    deploy = stack["apps"].read_namespaced_deployment("chat", "tenant-acme")
    assert deploy.metadata.labels[LABEL] == uid
    assert deploy.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert deploy.spec.template.spec.node_selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    # The pass writes its history row just after the status, so poll rather than race it.
    wait_for(lambda: ReconcileRun.objects.filter(service_id=pk, result="converged").exists(), what="a converged run")

    # Scale through the API: a second engine pod comes up on the cluster.
    response = stack["api"].post(f"/api/v1/services/{pk}/scale/", {"pool": "engine", "replicas": 2}, format="json")
    assert response.status_code == 200, response.content
    wait_for(lambda: service(pk).phase == "Ready" and service(pk).ready_replicas == 2, what="two ready replicas")
    assert len([p for p in engine_pods(stack, uid) if p.status.phase == "Running"]) == 2

    # A new engine setting rolls the pods: every ready pod afterwards carries the new flag.
    old_pods = {p.metadata.name for p in engine_pods(stack, uid)}
    current = stack["api"].get(f"/api/v1/services/{pk}/").json()
    response = stack["api"].patch(f"/api/v1/services/{pk}/",
                                  {"engine_settings": {"max_model_len": 4096}, "version": current["version"]},
                                  format="json")
    assert response.status_code == 200, response.content

    def rolled():
        pods = [p for p in engine_pods(stack, uid) if p.metadata.deletion_timestamp is None]
        ready = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
        return service(pk).phase == "Ready" and len(ready) == 2 and not ({p.metadata.name for p in ready} & old_pods)

    wait_for(rolled, timeout=180, what="a rolling update to new pods")
    args = " ".join(stack["apps"].read_namespaced_deployment("chat", "tenant-acme").spec.template.spec.containers[0].args)
    assert "--max-model-len 4096" in args

    # Delete: the cluster objects go first, then the row.
    assert stack["api"].delete(f"/api/v1/services/{pk}/").status_code in (202, 204)
    wait_for(lambda: not InferenceService.objects.filter(pk=pk).exists(), what="the row to go")
    assert stack["apps"].list_namespaced_deployment("tenant-acme", label_selector=f"{LABEL}={uid}").items == []
    assert stack["core"].list_namespaced_service("tenant-acme", label_selector=f"{LABEL}={uid}").items == []


def test_a_manual_edit_of_the_deployment_is_undone_by_the_next_resync(stack, settings):
    stack["workers"](1)
    pk = create_service(stack, name="drift")["id"]
    wait_for(lambda: service(pk).phase == "Ready", what="phase Ready")
    # Someone edits the image by hand, as `kubectl edit` would (a JSON merge patch from another manager).
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:hacked"}]}}}}
    stack["apps"].patch_namespaced_deployment("drift", "tenant-acme", patch)
    assert stack["apps"].read_namespaced_deployment("drift", "tenant-acme").spec.template.spec.containers[0].image \
        .endswith(":hacked")
    from workers.tasks.reconcile import reconcile_service

    reconcile_service.delay(pk)  # what the periodic resync enqueues for a service not checked for an interval
    wait_for(lambda: stack["apps"].read_namespaced_deployment("drift", "tenant-acme")
             .spec.template.spec.containers[0].image == "vllm/vllm-openai:v0.33.0", what="drift corrected")
    # The page can show what was found: a diff from the cluster's image to ours, marked as drift.
    from apps.serving.models import ServiceObservation

    drift = wait_for(lambda: ServiceObservation.objects.get(service_id=pk).drift, what="the drift to be recorded")
    assert drift[0]["object"] == "Deployment tenant-acme/drift"
    assert drift[0]["cause"] == "drift"
    assert "-        image: vllm/vllm-openai:hacked" in drift[0]["diff"]
    assert "+        image: vllm/vllm-openai:v0.33.0" in drift[0]["diff"]


def test_a_steady_state_resync_writes_nothing_to_the_cluster(stack):
    from workers.reconcile import reconcile

    pk = create_service(stack, name="steady")["id"]
    first = reconcile(pk)
    assert first.applied > 0
    run = ReconcileRun.objects.get(service_id=pk)
    assert (run.applied, run.result) == (first.applied, "progressing")
    assert run.duration_ms >= 1  # a pass that applied objects over HTTP took measurable time
    rv_before = stack["apps"].read_namespaced_deployment("steady", "tenant-acme").metadata.resource_version
    wait_for(lambda: reconcile(pk).result == "converged", what="converged")
    again = reconcile(pk)
    assert (again.applied, again.pruned) == (0, 0)
    deploy = stack["apps"].read_namespaced_deployment("steady", "tenant-acme")
    # The Deployment changed only through its controller's status writes, never through our spec.
    assert deploy.metadata.generation == 1
    assert int(deploy.metadata.resource_version) >= int(rv_before)


def test_an_unschedulable_service_fails_with_the_schedulers_reason_and_advice(stack):
    from workers.reconcile import reconcile

    pk = create_service(stack, name="too-big", gpus=2, gpu_type="l4-24gb")["id"]

    def judged():
        reconcile(pk)
        return service(pk).phase in ("Failed", "Degraded")

    wait_for(judged, what="Failed or Degraded")
    svc = service(pk)
    schedulable = next(c for c in svc.conditions if c["type"] == "Schedulable")
    assert schedulable["status"] == "False"
    assert "needs 2 × NVIDIA-L4 per replica; 0 of 2 NVIDIA-L4 nodes have 2 free" in schedulable["message"]
    assert "Insufficient nvidia.com/gpu" in schedulable["message"]
    from apps.serving.models import ServiceObservation

    events = ServiceObservation.objects.get(service_id=pk).events
    assert any(e["reason"] == "FailedScheduling" and e["object"].startswith("Pod/too-big-") for e in events)


def test_two_reconcilers_never_work_on_one_service_at_once(stack):
    """The advisory lock: while one process holds the claim, another pass returns 'busy' untouched."""
    from django.db import connection

    from workers.reconcile import LOCK_NAMESPACE, reconcile

    pk = create_service(stack, name="contended")["id"]
    s = connection.settings_dict
    # The other session reads its commands from a pipe: it takes the claim and holds it until the pipe is closed
    # (its session ends), not for a fixed time.
    holder = subprocess.Popen(
        ["psql", "-h", s["HOST"] or "127.0.0.1", "-p", str(s["PORT"] or 5432), "-U", s["USER"], "-d", s["NAME"]],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )
    holder.stdin.write(f"SELECT pg_advisory_lock({LOCK_NAMESPACE}, {pk});\n")
    holder.stdin.flush()
    try:
        # The other session holds the claim once PostgreSQL shows its advisory lock granted.
        wait_for(lambda: _advisory_lock_held(LOCK_NAMESPACE, pk), what="the other session's claim")
        outcome = reconcile(pk)
        assert outcome.result == "busy"
        assert stack["apps"].list_namespaced_deployment(
            "tenant-acme", label_selector=f"{LABEL}={service(pk).uid}").items == []
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    wait_for(lambda: not _advisory_lock_held(LOCK_NAMESPACE, pk), what="the other session's end")
    assert reconcile(pk).applied > 0  # the claim is free again once the other session ends


def set_faults(url: str, **faults) -> None:
    request = urllib.request.Request(f"{url}/kubesim/faults", data=json.dumps(faults).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_services_converge_despite_api_errors_and_conflicts_without_duplicate_objects(stack):
    # 10 % of requests fail and 10 % of updates conflict; the first 3 of each are certain, so that both kinds
    # hit the reconciler however few calls its cached passes make.
    set_faults(stack["url"], error_rate=0.1, conflict_rate=0.1, error_count=3, conflict_count=3,
               error_codes=[500, 503, 429])
    stack["workers"](2)
    ids = [create_service(stack, name=f"flaky-{i}")["id"] for i in range(3)]
    wait_for(resyncing(lambda: all(service(pk).phase == "Ready" for pk in ids)), timeout=240,
             what="every service Ready under injected faults")
    set_faults(stack["url"], error_rate=0.0, conflict_rate=0.0)
    for pk in ids:
        uid = str(service(pk).uid)
        deployments = stack["apps"].list_namespaced_deployment("tenant-acme", label_selector=f"{LABEL}={uid}").items
        services = stack["core"].list_namespaced_service("tenant-acme", label_selector=f"{LABEL}={uid}").items
        assert len(deployments) == 1
        assert len(services) == 1
    assert len(stack["apps"].list_namespaced_deployment("tenant-acme").items) == 3
    # The faults did hit the reconciler's requests (its calls retry a transient error up to 3 times within a
    # pass, so a run recorded as retrying is only likely, not certain, with the few calls a cached pass makes;
    # and a 10 % rate over the few updates of 3 services can miss them all).
    with urllib.request.urlopen(f"{stack['url']}/kubesim/faults/injected", timeout=5) as response:
        injected = json.loads(response.read())
    assert injected["errors"] > 0 and injected["conflicts"] > 0


def test_a_worker_killed_mid_reconcile_is_taken_over(stack):
    from django.db import connection

    from workers.reconcile import LOCK_NAMESPACE

    # Every API call takes 400 ms, so a pass is long enough to be caught in the middle.
    set_faults(stack["url"], latency_ms=400)
    (first,) = stack["workers"](1)
    pk = create_service(stack, name="orphan")["id"]

    def lock_held():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                           "AND objid = %s AND granted", [LOCK_NAMESPACE, pk])
            return cursor.fetchone()[0] == 1

    wait_for(lock_held, timeout=30, interval=0.05, what="the first worker to claim the service")
    first.kill()  # SIGKILL: no cleanup, the task is never acknowledged
    first.wait(timeout=10)
    wait_for(lambda: not lock_held(), timeout=30, what="the dead worker's claim to be released")
    set_faults(stack["url"], latency_ms=0)
    assert service(pk).phase != "Ready"

    stack["workers"](1)
    wait_for(resyncing(lambda: service(pk).phase == "Ready"), timeout=180, what="a second worker to finish the job")


def test_objects_a_new_spec_no_longer_needs_are_pruned_including_kinds_that_vanish(stack):
    from workers.reconcile import reconcile

    created = create_service(stack, name="routed", routing_policy="prefix_aware")
    pk, uid = created["id"], created["uid"]
    reconcile(pk)
    rbac = k8s.RbacAuthorizationV1Api(stack["apps"].api_client)
    assert stack["apps"].read_namespaced_deployment("routed-router", "tenant-acme").metadata.labels[LABEL] == uid
    assert [r.metadata.name for r in rbac.list_namespaced_role("tenant-acme", label_selector=f"{LABEL}={uid}").items]

    version = stack["api"].get(f"/api/v1/services/{pk}/").json()["version"]
    response = stack["api"].patch(f"/api/v1/services/{pk}/", {"routing_policy": "round_robin", "version": version},
                                  format="json")
    assert response.status_code == 200, response.content
    outcome = reconcile(pk)
    assert outcome.pruned >= 4  # router Deployment and Service, its ServiceAccount, Role and RoleBinding
    names = [d.metadata.name for d in stack["apps"].list_namespaced_deployment(
        "tenant-acme", label_selector=f"{LABEL}={uid}").items]
    assert names == ["routed"]
    assert rbac.list_namespaced_role("tenant-acme", label_selector=f"{LABEL}={uid}").items == []
    assert rbac.list_namespaced_role_binding("tenant-acme", label_selector=f"{LABEL}={uid}").items == []
