"""Engine faults selected by pod label: only the pods a selector picks are slowed (every step × k), answer
errors, or crash on start; the others run as before. Faults are set through `PATCH /kubesim/faults`, and the
engines' own metrics are read through the pod proxy."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from kubesim.cluster.faults import FaultConfig
from tests.kubesim.cluster_support import GPU_TOLERATION, deployment_of
from tests.polling import wait_for
from tests.simcluster import cluster_starter

CANARY = "controlplane.io/revision=7"


def engine(name, labels, args=()):
    container = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0",
                 "args": ["Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "4096", *args],
                 "ports": [{"containerPort": 8000, "name": "http"}],
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    body = deployment_of(name, 1, {"containers": [container], "tolerations": [GPU_TOLERATION]},
                         {"kubesim.io/time-scale": "20"})
    body["spec"]["template"]["metadata"]["labels"].update(labels)
    return body


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture
def two_engines():
    """A stable and a canary Deployment of one engine; the canary's pods carry revision 7."""
    def start(fault: dict):
        handle = make(nodes="h100-sxm-80gb:1x8", seed=9)
        handle.faults("PATCH", {"engine_faults": [{"selector": CANARY, **fault}]})
        ns = "faults"
        handle.core.create_namespace({"metadata": {"name": ns}})
        apps = client.AppsV1Api(handle.api_client)
        apps.create_namespaced_deployment(ns, engine("stable", {}))
        apps.create_namespaced_deployment(ns, engine("canary", {"controlplane.io/revision": "7"}))
        return handle, ns

    with cluster_starter() as make:
        yield start


def ready(handle, ns, name):
    return client.AppsV1Api(handle.api_client).read_namespaced_deployment(name, ns).status.ready_replicas == 1


def families(handle, ns, app):
    core = client.CoreV1Api(handle.api_client)
    pod = core.list_namespaced_pod(ns, label_selector=f"app={app}").items[0]
    text = core.connect_get_namespaced_pod_proxy_with_path(f"{pod.metadata.name}:8000", ns, "metrics")
    return {f.name: f for f in text_string_to_metric_families(text)}


def total(fams, name, suffix):
    return sum(s.value for s in fams[name].samples if s.name.endswith(suffix))


def test_a_slow_fault_multiplies_only_the_selected_pods_step_time(two_engines):
    handle, ns = two_engines({"slowdown": 2})
    wait_for(lambda: ready(handle, ns, "stable") and ready(handle, ns, "canary"), timeout=30.0, interval=0.1,
             message="both engines ready")
    # One request at a time on an idle engine, so each request's prefill is one step of the same prompt: the
    # canary's modelled TTFT is exactly the stable one's × 2 (the model's clock, not the wall clock's).
    prompt = "Explain the rollout. " * 40
    for app in ("stable", "canary"):
        base = f"{handle.server.url}/api/v1/namespaces/{ns}/services/{app}:8000/proxy"
        handle.core.create_namespaced_service(ns, {"metadata": {"name": app}, "spec": {
            "selector": {"app": app}, "ports": [{"port": 8000, "targetPort": 8000}]}})
        for _ in range(3):
            assert post(base + "/v1/completions", {"prompt": prompt, "max_tokens": 1}) == 200
    ttft = {app: total(families(handle, ns, app), "vllm:time_to_first_token_seconds", "_sum")
            for app in ("stable", "canary")}
    assert ttft["canary"] == pytest.approx(2 * ttft["stable"], rel=0.02), ttft


def test_an_error_fault_fails_the_selected_pods_requests_and_spares_the_others(two_engines):
    handle, ns = two_engines({"error_rate": 1.0})
    wait_for(lambda: ready(handle, ns, "stable") and ready(handle, ns, "canary"), timeout=30.0, interval=0.1,
             message="both engines ready")
    statuses = {}
    for app in ("stable", "canary"):
        handle.core.create_namespaced_service(ns, {"metadata": {"name": app}, "spec": {
            "selector": {"app": app}, "ports": [{"port": 8000, "targetPort": 8000}]}})
        base = f"{handle.server.url}/api/v1/namespaces/{ns}/services/{app}:8000/proxy"
        statuses[app] = [post(base + "/v1/completions", {"prompt": "hi", "max_tokens": 1}) for _ in range(3)]
    assert statuses == {"stable": [200] * 3, "canary": [500] * 3}


def test_a_crash_on_start_fault_crash_loops_only_the_selected_pods(two_engines):
    handle, ns = two_engines({"crash_on_start": True})
    core = client.CoreV1Api(handle.api_client)

    def restarts(app):
        pod = core.list_namespaced_pod(ns, label_selector=f"app={app}").items[0]
        statuses = pod.status.container_statuses or []
        return statuses[0].restart_count if statuses else 0

    wait_for(lambda: ready(handle, ns, "stable") and restarts("canary") >= 1, timeout=30.0, interval=0.1,
             message="stable ready, canary restarted")
    assert not ready(handle, ns, "canary")
    assert restarts("stable") == 0


def test_bad_engine_faults_are_refused_with_the_reason():
    for rule, words in (({"selector": ""}, "selector must be a non-empty"),
                        ({"selector": CANARY, "slowdown": 0.5}, "slowdown must be a number of at least 1"),
                        ({"selector": CANARY, "error_rate": 2}, "error_rate must be a number between 0 and 1"),
                        ({"selector": CANARY, "flaky": True}, "engine_faults entries take")):
        with pytest.raises(ValueError, match=words):
            FaultConfig.from_dict({"engine_faults": [rule]})
