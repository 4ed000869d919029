"""A pass's calls side by side (`Kube.each`): bounded by KUBE_PARALLEL_REQUESTS, under the pass's deadline,
results in order; and a first pass that applies its objects in waves still creates a working service."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from apps.clusters.models import ClusterCredentials
from apps.rollouts.plan import desired_spec
from apps.serving.rendering import render_service, service_objects
from tests.factories import ClusterFactory, InferenceServiceFactory
from workers.kube import Kube, ObjectRef, waves
from workers.kubeerrors import TransientClusterError
from workers.reconcile import WORKLOAD_NEEDS, reconcile


def _kube(url: str, parallel: int) -> Kube:
    kube = Kube(ClusterCredentials(api_url=url, bearer_token="", kubeconfig="", ca_bundle="", verify_tls=False))
    kube.parallel = parallel
    return kube


def test_calls_run_side_by_side_up_to_the_bound_and_answer_in_order(db):
    kube = _kube("http://127.0.0.1:9", parallel=3)  # no request is made: the calls are plain functions
    barrier = threading.Barrier(3, timeout=10)  # passes only if three calls are in flight at once
    in_flight, peak, lock = [0], [0], threading.Lock()

    def call(i):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        if i < 3:
            barrier.wait()
        time.sleep(0.05)
        with lock:
            in_flight[0] -= 1
        return i * 10

    assert kube.each(call, list(range(7))) == [0, 10, 20, 30, 40, 50, 60]
    assert peak[0] == 3  # never more than the bound
    kube.close()


def test_calls_side_by_side_keep_the_pass_deadline_and_raise_the_first_error(db):
    kube = _kube("http://127.0.0.1:9", parallel=4)
    with kube.pass_deadline(0.2):
        time.sleep(0.3)  # the pass is past its deadline: every call made now must refuse
        with pytest.raises(TransientClusterError, match="deadline"):
            kube.each(lambda _: kube._timeout(), [1, 2, 3])

    def fails_on_two(i):
        if i == 2:
            raise ValueError("two")
        return i

    with pytest.raises(ValueError, match="two"):
        kube.each(fails_on_two, [1, 2, 3])
    kube.close()


def test_a_first_pass_with_parallel_applies_creates_a_service_that_becomes_ready(db, make_cluster, tenant_a,
                                                                              settings):
    """Waves: the Namespace before what lives in it, workloads after their ServiceAccount and ConfigMap. A
    fresh tenant's first pass would fail (404 namespace) if any namespaced object went before the Namespace."""
    settings.KUBE_PARALLEL_REQUESTS = 8
    handle = make_cluster(nodes="h100-sxm-80gb:1x8,cpu:1")
    cluster = ClusterFactory(api_url=handle.url)
    service = InferenceServiceFactory(tenant=tenant_a, name="waves", cluster=cluster,
                                      deployment_mode="pd_disaggregated", routing_policy="round_robin",
                                      pools=[{"role": "prefill", "replicas": 1}, {"role": "decode", "replicas": 1}])
    first = reconcile(service.pk)
    # Namespace, quota, NetworkPolicy, model volume and the disaggregated service's own objects: well over 8.
    assert first.applied > 8, first
    deadline = time.monotonic() + 60
    while True:
        service.refresh_from_db()
        if service.phase == "Ready":
            break
        assert time.monotonic() < deadline, service.conditions
        time.sleep(0.5)
        reconcile(service.pk)


def test_what_pods_need_goes_first_and_the_rest_of_a_service_in_one_wave(db, tenant_a):
    """A standard service's own objects (Deployment, Service, PodDisruptionBudget) need nothing of each other
    when they are created: one wave, one round trip. A serverless service's router reads pods with its own
    ServiceAccount, Role and RoleBinding: those go first, then its Deployments, Services and budget."""
    expected = {
        "standard": [["Deployment", "PodDisruptionBudget", "Service"]],
        "serverless": [["Role", "RoleBinding", "ServiceAccount"],
                       ["Deployment", "Deployment", "PodDisruptionBudget", "Service", "Service"]],
    }
    for mode, kinds in expected.items():
        service = InferenceServiceFactory(tenant=tenant_a, name=mode, deployment_mode=mode,
                                          routing_policy="round_robin")
        spec = replace(desired_spec(service), api_server_cidrs=("10.0.0.1/32",))
        items = [(ObjectRef.of(obj), obj) for obj in service_objects(render_service(spec))]
        assert [sorted(ref.kind for ref, _ in wave) for wave in waves(items, WORKLOAD_NEEDS)] == kinds, mode
