"""The simulated routers split requests between revisions by the canary weight their pod is annotated with:
the interleave counted by hand, then end to end (a router Deployment over a stable and a canary Deployment in
kubesim, the engines' own request counters read through the pod proxy)."""

from __future__ import annotations

import json
import urllib.request

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from enginevocab.labels import CANARY_WEIGHTS_ANNOTATION, REVISION_LABEL
from kubesim.engines.canary_split import RevisionSplit
from kubesim.workload import Endpoint
from tests.kubesim.cluster_support import GPU_TOLERATION, deployment_of
from tests.polling import wait_for
from tests.simcluster import cluster_starter

STABLE = [Endpoint("stable-a", "http://a", {}), Endpoint("stable-b", "http://b", {})]
CANARY = [Endpoint("canary-a", "http://c", {REVISION_LABEL: "7"})]


def test_of_the_first_n_requests_exactly_floor_n_times_the_share_go_to_the_canary():
    split = RevisionSplit("7=25")
    chosen = [split.choose(STABLE + CANARY) for _ in range(8)]
    # ⌊n·25/100⌋ for n = 1…8 is 0,0,0,1,1,1,1,2: the 4th and the 8th request go to revision 7.
    assert chosen == [None, None, None, "7", None, None, None, "7"]
    assert split.narrow("7", STABLE + CANARY) == (CANARY,)
    assert split.narrow(None, STABLE + CANARY) == (STABLE,)


def test_without_a_ready_canary_pod_stable_serves_and_nothing_is_owed():
    split = RevisionSplit("7=50")
    # Requests 1–4 find no canary pod: all stable, and what the canary was due (⌊4·50/100⌋ = 2) is forgiven.
    # Then the canary is back: request 5 is due ⌊5/2⌋ = 2, already counted, so stable; request 6 is due 3: canary.
    assert [split.choose(STABLE) for _ in range(4)] == [None] * 4
    assert [split.choose(STABLE + CANARY) for _ in range(2)] == [None, "7"]
    # With no stable pod ready the canary serves everything.
    assert split.choose(CANARY) == "7"


def test_a_router_without_the_annotation_does_not_split():
    split = RevisionSplit(None)
    assert not split
    assert split.choose(STABLE + CANARY) is None


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status


def engine(name, labels):
    container = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0",
                 "args": ["Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "4096"],
                 "ports": [{"containerPort": 8000, "name": "http"}],
                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    body = deployment_of(name, 1, {"containers": [container], "tolerations": [GPU_TOLERATION]},
                         {"kubesim.io/time-scale": "5"})
    body["spec"]["template"]["metadata"]["labels"].update(labels)
    return body


def test_a_router_deployment_sends_the_canary_its_share_end_to_end():
    with cluster_starter() as make:
        handle = make(nodes="h100-sxm-80gb:1x8", seed=5)
        ns = "split"
        handle.core.create_namespace({"metadata": {"name": ns}})
        apps, core = client.AppsV1Api(handle.api_client), client.CoreV1Api(handle.api_client)
        apps.create_namespaced_deployment(ns, engine("stable", {"tier": "llm"}))
        apps.create_namespaced_deployment(ns, engine("canary", {"tier": "llm", REVISION_LABEL: "7"}))
        router = {"name": "router", "image": "lmcache/lmstack-router:latest", "command": ["vllm-router"],
                  "args": ["--host", "0.0.0.0", "--port", "8000", "--service-discovery", "k8s", "--k8s-namespace", ns,
                           "--k8s-port", "8000", "--k8s-label-selector", "tier=llm", "--routing-logic", "roundrobin"],
                  "ports": [{"containerPort": 8000, "name": "http"}]}
        apps.create_namespaced_deployment(ns, deployment_of("router", 1, {"containers": [router]},
                                                            {CANARY_WEIGHTS_ANNOTATION: "7=5"}))
        core.create_namespaced_service(ns, {"metadata": {"name": "router"}, "spec": {
            "selector": {"app": "router"}, "ports": [{"port": 8000, "targetPort": 8000}]}})

        def ready(name):
            return apps.read_namespaced_deployment(name, ns).status.ready_replicas == 1

        wait_for(lambda: all(ready(n) for n in ("stable", "canary", "router")), timeout=30.0, interval=0.1,
                 message="engines and router ready")
        base = f"{handle.server.url}/api/v1/namespaces/{ns}/services/router:8000/proxy"
        for i in range(60):
            assert post(base + "/v1/completions", {"prompt": f"question {i}", "max_tokens": 1}) == 200

        def served(app):
            pod = core.list_namespaced_pod(ns, label_selector=f"app={app}").items[0]
            text = core.connect_get_namespaced_pod_proxy_with_path(f"{pod.metadata.name}:8000", ns, "metrics")
            families = {f.name: f for f in text_string_to_metric_families(text)}
            return sum(s.value for s in families["vllm:request_success"].samples if s.name.endswith("_total"))

        # 60 requests at 5 %: ⌊60·5/100⌋ = 3 to the canary, 57 to stable.
        assert (served("canary"), served("stable")) == (3, 57)
