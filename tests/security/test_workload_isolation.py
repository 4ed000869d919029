"""The cluster side of the tenant boundary: hardened pods, Pod Security labels and a default-deny ingress
NetworkPolicy per tenant namespace, enforced by kubesim's pod and service proxies."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request

import pytest
from django.core.exceptions import ValidationError

from apps.serving.rendering import render_service
from kubesim.cluster.netpol import APISERVER_ADDRESS, SOURCE_POD_HEADER
from tests.factories import ClusterFactory, InferenceServiceFactory, TenantFactory
from tests.serving.golden.specs import SPECS
from tests.telemetry.conftest import reconcile_until_ready


def pod_specs(obj):
    spec = obj.get("spec", {})
    if obj["kind"] == "Deployment":
        return [spec["template"]["spec"]]
    if obj["kind"] == "LeaderWorkerSet":
        template = spec["leaderWorkerTemplate"]
        return [template[side]["spec"] for side in ("leaderTemplate", "workerTemplate") if side in template]
    return []


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_rendered_container_is_hardened(name):
    spec = SPECS[name]()
    pods = [p for obj in render_service(spec) for p in pod_specs(obj)]
    assert pods
    for pod in pods:
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, container["name"]
            assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
            assert not context.get("privileged"), container["name"]


@pytest.mark.parametrize("name", [n for n in sorted(SPECS) if n.endswith("-vllm")])
def test_vllm_engines_run_as_a_non_root_user_with_a_writable_home(name):
    for obj in render_service(SPECS[name]()):
        for pod in pod_specs(obj):
            engine = next((c for c in pod["containers"] if c["name"] == "engine"), None)
            if engine is None:
                continue  # a router or the endpoint picker
            context = engine["securityContext"]
            assert context["runAsNonRoot"] is True and context["runAsUser"] == 1000
            home = {e["name"]: e.get("value") for e in engine["env"]}["HOME"]
            mounted = {m["mountPath"]: m["name"] for m in engine["volumeMounts"]}
            volume = next(v for v in pod["volumes"] if v["name"] == mounted[home])
            assert "emptyDir" in volume  # writable by any uid


def test_the_tenant_namespace_enforces_baseline_and_warns_restricted():
    namespace = next(o for o in render_service(SPECS["standard-vllm"]()) if o["kind"] == "Namespace")
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"


def test_the_tenant_namespace_denies_ingress_but_from_itself_the_api_server_and_the_gateway():
    spec = dataclasses.replace(SPECS["standard-vllm"](), api_server_cidrs=("10.0.0.5/32",))
    policies = [o for o in render_service(spec) if o["kind"] == "NetworkPolicy"
                and o["metadata"]["name"] == "tenant-isolation"]
    assert len(policies) == 1
    policy = policies[0]["spec"]
    assert policies[0]["metadata"]["namespace"] == "tenant-acme"
    assert policy["podSelector"] == {} and policy["policyTypes"] == ["Ingress"]
    peers = [peer for rule in policy["ingress"] for peer in rule["from"]]
    assert {"podSelector": {}} in peers  # every pod of the same namespace (engines, routers, the gateway's EPP)
    assert {"ipBlock": {"cidr": "10.0.0.5/32"}} in peers
    # One other namespace only: the inference gateway's pods, by namespace and pod labels both, and to the
    # engines' and routers' HTTP ports only (vLLM 8000, SGLang 30000; the router listens on 8000 too).
    others = [rule for rule in policy["ingress"] if any("namespaceSelector" in peer for peer in rule["from"])]
    assert others == [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "controlplane"}},
                                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "controlplane",
                                                                 "app.kubernetes.io/component": "gateway"}}}],
                       "ports": [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 30000}]}]


def proxy(url, namespace, service, path, source=None):
    request = urllib.request.Request(f"{url}/api/v1/namespaces/{namespace}/services/{service}/proxy{path}")
    if source:
        request.add_header(SOURCE_POD_HEADER, source)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_kubesim_refuses_a_cross_tenant_call_and_serves_a_same_tenant_one(db, make_cluster):
    handle = make_cluster()
    cluster = ClusterFactory(name="sim", api_url=handle.url)
    alpha, bravo = TenantFactory(slug="alpha"), TenantFactory(slug="bravo")
    pools = [{"role": "engine", "replicas": 1, "gpu_type": "h100-sxm-80gb"}]
    mine = reconcile_until_ready(InferenceServiceFactory(tenant=alpha, name="chat", cluster=cluster, pools=pools))
    theirs = reconcile_until_ready(InferenceServiceFactory(tenant=bravo, name="chat", cluster=cluster, pools=pools))
    # The control plane's path (no source pod: the API server itself) is let in by the ipBlock rule.
    policy = handle.server.store.get("networking.k8s.io/v1/networkpolicies", "tenant-alpha", "tenant-isolation")
    assert {"ipBlock": {"cidr": f"{APISERVER_ADDRESS}/32"}} in [p for r in policy["spec"]["ingress"] for p in r["from"]]

    pod_a = handle.core.list_namespaced_pod("tenant-alpha").items[0].metadata.name
    source = f"tenant-alpha/{pod_a}"
    status, body = proxy(handle.url, "tenant-alpha", mine.name, "/v1/models", source)
    assert status == 200 and json.loads(body)["data"]
    status, body = proxy(handle.url, "tenant-bravo", theirs.name, "/v1/models", source)
    assert status == 503 and b"NetworkPolicy" in body
    status, _ = proxy(handle.url, "tenant-bravo", theirs.name, "/v1/models")  # the control plane
    assert status == 200

    # The pod proxy too: alpha's pod cannot reach bravo's engine pod, the API server can.
    pod_b = handle.core.list_namespaced_pod("tenant-bravo").items[0].metadata.name
    pod_path = f"{handle.url}/api/v1/namespaces/tenant-bravo/pods/{pod_b}:8000/proxy/metrics"
    for header, expected in ((source, 503), (None, 200)):
        request = urllib.request.Request(pod_path, headers={SOURCE_POD_HEADER: header} if header else {})
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                status = response.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status == expected, header


def test_a_clusters_own_api_server_cidrs_replace_the_discovered_address(db, make_cluster):
    # Where the API server's proxy traffic comes from another address than its Endpoints (a konnectivity
    # agent, say), staff name it on the cluster; the NetworkPolicy admits exactly that.
    handle = make_cluster()
    cluster = ClusterFactory(name="sim", api_url=handle.url, api_server_cidrs=["10.20.0.0/28"])
    reconcile_until_ready(InferenceServiceFactory(tenant=TenantFactory(slug="alpha"), name="chat", cluster=cluster,
                                                  pools=[{"role": "engine", "gpu_type": "h100-sxm-80gb"}]))
    policy = handle.server.store.get("networking.k8s.io/v1/networkpolicies", "tenant-alpha", "tenant-isolation")
    blocks = [p["ipBlock"]["cidr"] for r in policy["spec"]["ingress"] for p in r["from"] if "ipBlock" in p]
    assert blocks == ["10.20.0.0/28"]


def test_a_cidr_that_does_not_parse_is_refused_naming_the_field(db):
    from django.core.exceptions import ValidationError

    cluster = ClusterFactory.build(name="sim", api_server_cidrs=["10.0.0.0/33"])
    with pytest.raises(ValidationError) as caught:
        cluster.full_clean()
    assert "api_server_cidrs" in caught.value.message_dict


@pytest.mark.parametrize("cidr", ["169.254.169.254/32", "169.254.0.0/16", "fe80::1/128"])
def test_a_model_egress_block_inside_link_local_is_refused(db, cidr):
    cluster = ClusterFactory.build(name="meta", insecure_simulator=True, model_egress_cidrs=[cidr])

    with pytest.raises(ValidationError) as caught:
        cluster.full_clean()

    assert "cloud metadata" in " ".join(caught.value.message_dict["model_egress_cidrs"])


def test_a_block_that_contains_link_local_is_rendered_with_it_carved_out():
    spec = dataclasses.replace(SPECS["standard-vllm"](), model_egress_cidrs=("0.0.0.0/0", "10.8.0.0/16"))
    policy = next(o for o in render_service(spec) if o["metadata"]["name"] == "tenant-egress")

    blocks = [p["ipBlock"] for r in policy["spec"]["egress"] for p in r["to"] if "ipBlock" in p]
    assert blocks == [{"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16"]}, {"cidr": "10.8.0.0/16"}]
