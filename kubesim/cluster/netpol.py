"""NetworkPolicy, as the pod and service proxies enforce it: ingress to a pod selected by any policy of its
namespace is allowed only from a peer one of those policies admits.

Traffic through the proxies has a source: a pod named by the `X-Kubesim-Source-Pod: <namespace>/<name>`
header (a simulated in-cluster caller), or else the API server itself, whose address (`APISERVER_ADDRESS`)
is published like a real cluster's in the `default/kubernetes` Service's Endpoints. Peers understood:
`podSelector`, `namespaceSelector` (both, or either alone) and `ipBlock` (with `except`); rule `ports` are
matched against the target port's number or name.

Egress is enforced the same way from the source pod's side: a pod selected by an Egress policy of its
namespace may reach only what one of those policies' `to` peers admits. A proxied call between pods must pass
both the source's egress and the target's ingress; `connection_allowed` answers for a destination outside any
pod (a cloud metadata address, a model source), as a pod's own dial would be filtered.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from kubesim.apiserver.errors import ApiError
from kubesim.apiserver.selectors import parse_label_selector, selector_from_label_selector

NETWORK_POLICIES = "networking.k8s.io/v1/networkpolicies"
SOURCE_POD_HEADER = "X-Kubesim-Source-Pod"
APISERVER_ADDRESS = "192.168.0.2"
APISERVER_PORT = 6443


@dataclass(frozen=True)
class Source:
    """Where a proxied request comes from: a pod (namespace, labels, IP) or an address outside any pod."""

    ip: str
    namespace: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def is_pod(self) -> bool:
        return self.namespace is not None


def source_of(store, header: str | None) -> Source:
    """The request's source: the pod the header names (400 when malformed or absent), else the API server."""
    if not header:
        return Source(APISERVER_ADDRESS)
    namespace, _, name = header.partition("/")
    if not namespace or not name:
        raise ApiError.bad_request(f"{SOURCE_POD_HEADER} must be <namespace>/<pod>, not {header!r}")
    pod = store.get("v1/pods", namespace, name)
    ip = (pod.get("status") or {}).get("podIP") or ""
    return Source(ip, namespace, tuple(sorted((pod["metadata"].get("labels") or {}).items())))


def _selects(selector: dict | None, labels: dict) -> bool:
    """A LabelSelector against labels; `{}` selects everything."""
    match = parse_label_selector(selector_from_label_selector(selector or {}))
    return match is None or match({"metadata": {"labels": labels}})


def _peer_admits(store, peer: dict, target_namespace: str, source: Source) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        try:
            address = ipaddress.ip_address(source.ip)
        except ValueError:
            return False
        if address not in ipaddress.ip_network(block["cidr"], strict=False):
            return False
        return not any(address in ipaddress.ip_network(c, strict=False) for c in block.get("except") or [])
    if not source.is_pod:
        return False  # pod and namespace selectors pick pods, never the API server
    if "namespaceSelector" in peer:
        namespace = store.get("v1/namespaces", None, source.namespace)
        # every namespace carries its name as a label, which the API server sets (Kubernetes 1.21+)
        labels = {**(namespace["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": source.namespace}
        if not _selects(peer["namespaceSelector"], labels):
            return False
    elif source.namespace != target_namespace:
        return False  # a podSelector alone picks pods of the policy's own namespace
    return "podSelector" not in peer or _selects(peer["podSelector"], dict(source.labels))


def _port_admits(rule: dict, port: int | None, port_name: str | None) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    return any(p.get("port") is None or str(p.get("port")) in {str(port), port_name} for p in ports)


def _policy_types(spec: dict) -> list[str]:
    # As the API server defaults it: Ingress always, Egress when the policy has egress rules.
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def _allowed(store, namespace: str, labels: dict, direction: str, peer: Source, port, port_name) -> bool:
    """Whether the `direction` ("Ingress"/"Egress") policies of namespace that select a pod with labels let it
    talk with peer: not isolated in that direction, or admitted by some rule of a selecting policy."""
    policies, _ = store.list(NETWORK_POLICIES, namespace)
    isolating = [p for p in policies if direction in _policy_types(p.get("spec") or {})
                 and _selects((p.get("spec") or {}).get("podSelector"), labels)]
    if not isolating:
        return True
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in isolating:
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            admitted = not peers or any(_peer_admits(store, p, namespace, peer) for p in peers)
            if admitted and _port_admits(rule, port, port_name):
                return True
    return False


def connection_allowed(store, source: Source, destination: Source, port: int | None = None,
                       port_name: str | None = None) -> bool:
    """Whether the source pod's egress policies let it open a connection to destination (a pod or an address)."""
    if not source.is_pod:
        return True  # egress policies filter pods' traffic only
    return _allowed(store, source.namespace, dict(source.labels), "Egress", destination, port, port_name)


def ingress_allowed(store, pod: dict, source: Source, port: int | None = None, port_name: str | None = None) -> bool:
    """Whether `source` may reach the pod (on `port`): the source pod's egress and the pod's ingress policies."""
    namespace = pod["metadata"].get("namespace") or "default"
    labels = pod["metadata"].get("labels") or {}
    target = Source((pod.get("status") or {}).get("podIP") or "", namespace, tuple(sorted(labels.items())))
    if not connection_allowed(store, source, target, port, port_name):
        return False
    return _allowed(store, namespace, labels, "Ingress", source, port, port_name)


def refused(pod: dict, port) -> ApiError:
    """What the proxy answers for dropped traffic: the dial times out, as on a real cluster."""
    address = f"{(pod.get('status') or {}).get('podIP') or pod['metadata']['name']}:{port or 80}"
    return ApiError(503, "ServiceUnavailable",
                    f"error trying to reach service: dial tcp {address}: i/o timeout (dropped by NetworkPolicy)")


def api_server_objects() -> list[tuple[str, dict]]:
    """The `default/kubernetes` Service and its Endpoints, which tell clients the API server's address."""
    meta = {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver",
                                                                      "provider": "kubernetes"}}
    return [
        ("v1/services", {"apiVersion": "v1", "kind": "Service", "metadata": dict(meta),
                         "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                             "targetPort": APISERVER_PORT}]}}),
        ("v1/endpoints", {"apiVersion": "v1", "kind": "Endpoints", "metadata": dict(meta),
                          "subsets": [{"addresses": [{"ip": APISERVER_ADDRESS}],
                                       "ports": [{"name": "https", "port": APISERVER_PORT, "protocol": "TCP"}]}]}),
    ]
