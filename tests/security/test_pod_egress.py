"""The tenant-egress NetworkPolicy end to end: an engine pod of a service the control plane reconciled makes its
own connections (`curl` through `kubectl exec`'s API, the official client's stream, into kubesim's pod network)
and reaches only DNS, its namespace's pods and the cluster's model sources, never the cloud metadata address."""

from __future__ import annotations

import json

from kubernetes.stream import stream

from tests.factories import ClusterFactory, InferenceServiceFactory, TenantFactory
from tests.telemetry.conftest import reconcile_until_ready

METADATA = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
POOLS = [{"role": "engine", "replicas": 2, "gpu_type": "h100-sxm-80gb"}]


def exec_in(handle, namespace: str, pod: str, *command: str) -> tuple[int, str, str]:
    """Run command in the pod's engine container through the API server's exec stream: (exit code, out, err)."""
    response = stream(handle.core.connect_get_namespaced_pod_exec, pod, namespace, container="engine",
                      command=list(command), stderr=True, stdin=False, stdout=True, tty=False,
                      _preload_content=False)
    response.run_forever(timeout=30)
    return response.returncode, response.read_stdout(), response.read_stderr()


def engines(handle, namespace: str) -> list:
    return sorted(handle.core.list_namespaced_pod(namespace).items, key=lambda p: p.metadata.name)


def deploy(handle, **cluster_fields):
    cluster = ClusterFactory(name="sim", api_url=handle.url, **cluster_fields)
    return reconcile_until_ready(InferenceServiceFactory(tenant=TenantFactory(slug="alpha"), name="chat",
                                                         cluster=cluster, pools=POOLS))


def engine_port(handle, service) -> int:
    return handle.core.read_namespaced_service(service.name, "tenant-alpha").spec.ports[0].port


def test_an_engine_pod_cannot_read_the_metadata_address_but_reaches_its_namespace_and_model_sources(
        db, make_cluster):
    handle = make_cluster()
    service = deploy(handle, model_egress_cidrs=["0.0.0.0/0"])
    first, second = engines(handle, "tenant-alpha")
    me = first.metadata.name

    code, out, err = exec_in(handle, "tenant-alpha", me, "curl", "-sS", "-m", "3", METADATA)
    assert (code, out) == (28, "")
    assert "Failed to connect to 169.254.169.254 port 80" in err
    code, _, _ = exec_in(handle, "tenant-alpha", me, "curl", "-sS", "http://169.254.170.2/v2/credentials")
    assert code == 28  # the whole link-local block, not one address

    # A model source (any address of 0.0.0.0/0 but link-local) answers.
    code, out, _ = exec_in(handle, "tenant-alpha", me, "curl", "-sSf", "https://203.0.113.7/models/llama")
    assert code == 0 and "203.0.113.7:443" in out
    # The other engine pod by its IP, and the service by its DNS name (the lookup goes to kube-dns).
    port = engine_port(handle, service)
    code, out, _ = exec_in(handle, "tenant-alpha", me, "curl", "-sSf", f"http://{second.status.pod_ip}:{port}/v1/models")
    assert code == 0 and json.loads(out)["data"]
    code, out, _ = exec_in(handle, "tenant-alpha", me, "curl", "-sSf",
                           f"http://{service.name}.tenant-alpha.svc.cluster.local:{port}/v1/models")
    assert code == 0 and json.loads(out)["data"]


def test_without_the_egress_policy_the_same_pod_would_read_the_nodes_credentials(db, make_cluster):
    # The control for the test above: what the tenant-egress policy stops is really there to be read.
    handle = make_cluster()
    deploy(handle, model_egress_cidrs=["0.0.0.0/0"])
    me = engines(handle, "tenant-alpha")[0].metadata.name
    handle.server.store.delete("networking.k8s.io/v1/networkpolicies", "tenant-alpha", "tenant-egress")

    code, out, _ = exec_in(handle, "tenant-alpha", me, "curl", "-sSf", METADATA)

    assert code == 0 and out.strip()


def test_without_model_sources_an_engine_pod_reaches_dns_and_its_namespace_only(db, make_cluster):
    handle = make_cluster()
    service = deploy(handle)
    first, second = engines(handle, "tenant-alpha")
    me, port = first.metadata.name, engine_port(handle, service)

    for url in ("https://203.0.113.7/models/llama", METADATA):
        code, out, err = exec_in(handle, "tenant-alpha", me, "curl", "-sS", url)
        assert (code, out) == (28, ""), url
        assert "Timeout was reached" in err
    code, out, _ = exec_in(handle, "tenant-alpha", me, "curl", "-sSf", f"http://{service.name}:{port}/v1/models")
    assert code == 0 and json.loads(out)["data"]
    code, out, _ = exec_in(handle, "tenant-alpha", me, "curl", "-sSf", f"http://{second.status.pod_ip}:{port}/health")
    assert code == 0


def test_an_engine_pod_cannot_dial_another_tenants_engine(db, make_cluster):
    handle = make_cluster()
    cluster = ClusterFactory(name="sim", api_url=handle.url, model_egress_cidrs=["0.0.0.0/0"])
    pools = [{"role": "engine", "replicas": 1, "gpu_type": "h100-sxm-80gb"}]
    reconcile_until_ready(InferenceServiceFactory(tenant=TenantFactory(slug="alpha"), name="chat",
                                                  cluster=cluster, pools=pools))
    theirs = reconcile_until_ready(InferenceServiceFactory(tenant=TenantFactory(slug="bravo"), name="chat",
                                                           cluster=cluster, pools=pools))
    me = engines(handle, "tenant-alpha")[0].metadata.name
    target = engines(handle, "tenant-bravo")[0]
    port = handle.core.read_namespaced_service(theirs.name, "tenant-bravo").spec.ports[0].port

    for url in (f"http://{target.status.pod_ip}:{port}/v1/models", f"http://{theirs.name}.tenant-bravo:{port}/v1/models"):
        code, out, _ = exec_in(handle, "tenant-alpha", me, "curl", "-sS", url)
        assert (code, out) == (28, ""), url


def test_curl_answers_as_curl_does_for_a_pods_own_port_a_closed_one_and_an_unknown_name(db, make_cluster):
    handle = make_cluster()
    service = deploy(handle)
    me, port = engines(handle, "tenant-alpha")[0].metadata.name, engine_port(handle, service)

    code, out, _ = exec_in(handle, "tenant-alpha", me, "curl", "-s", f"http://localhost:{port}/v1/models")
    assert code == 0 and json.loads(out)["data"]
    code, _, err = exec_in(handle, "tenant-alpha", me, "curl", "-sS", "http://localhost:9/")
    assert code == 7 and "Connection refused" in err
    code, _, err = exec_in(handle, "tenant-alpha", me, "curl", "-sS", f"http://nothing-here:{port}/")
    assert code == 6 and "Could not resolve host: nothing-here" in err
    code, _, err = exec_in(handle, "tenant-alpha", me, "curl", "-sSf", f"http://localhost:{port}/no-such-path")
    assert code == 22 and "returned error: 404" in err
