"""A container's own connections (a pod dialing out), as `curl` in `kubectl exec` makes them
(kubesim/cluster/shell.py).

A host name is resolved by the cluster DNS (`<service>[.<namespace>[.svc[.cluster.local]]]` to the Service's
cluster IP), which the pod must be allowed to reach: kube-dns, a pod labelled `k8s-app: kube-dns` in
`kube-system` at the `/etc/resolv.conf` nameserver, port 53. The address then leads to a pod (its own IP, or a
Service's cluster IP, which picks the first ready pod the Service selects, on the Service port's targetPort),
answered by that pod's workload; or outside the cluster, answered by kubesim's stand-in for the outside network:
a cloud's instance-metadata service at 169.254.169.254 (it hands out the node's credentials, which is why the
tenant-egress policy blocks link-local addresses) and a plain web server at any other address.

Every connection passes the source pod's egress policies and, to a pod, the target's ingress policies
(`kubesim.cluster.netpol`), as a real CNI filters a pod's own dial. A dropped connection fails as curl reports a
timeout (exit 28), at once rather than after the timeout; a pod port nothing listens on is refused (exit 7); a
name that does not resolve, or whose lookup is dropped, is exit 6. `localhost` is the pod itself, unfiltered.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

from kubesim.apiserver.errors import ApiError
from kubesim.cluster.netpol import Source, connection_allowed, ingress_allowed

CLUSTER_DNS = Source("10.96.0.10", "kube-system", (("k8s-app", "kube-dns"),))
DNS_PORT = 53
METADATA_ADDRESS = "169.254.169.254"
METADATA_ROLE = "kubesim-node-role"
UNRESOLVED, REFUSED, TIMED_OUT = 6, 7, 28


@dataclass(frozen=True)
class Route:
    """Where a connection goes: a failure (curl's exit code and message), a pod's workload (a loopback URL to
    fetch), or an answer of the outside network (status and body)."""

    error: int = 0
    message: str = ""
    local_url: str | None = None
    status: int = 0
    body: str = ""


def _dropped(host: str, port: int) -> Route:
    return Route(TIMED_OUT, f"Failed to connect to {host} port {port}: Timeout was reached")


def _refused(host: str, port: int) -> Route:
    return Route(REFUSED, f"Failed to connect to {host} port {port}: Connection refused")


def port_number_and_name(pod: dict, port) -> tuple[int | None, str | None]:
    """A container port given by number or name, as (number, name) for NetworkPolicy port rules."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for candidate in container.get("ports") or []:
            if str(port) in (str(candidate.get("containerPort")), candidate.get("name")):
                return candidate.get("containerPort"), candidate.get("name")
    return (int(port), None) if str(port or "").isdigit() else (None, str(port) if port else None)


def metadata_answer(path: str) -> tuple[int, str]:
    """What a cloud's instance-metadata service answers (the shape of EC2's IMDS)."""
    credentials = "/latest/meta-data/iam/security-credentials/"
    if path.rstrip("/") + "/" == credentials:
        return 200, METADATA_ROLE
    if path == credentials + METADATA_ROLE:
        return 200, json.dumps({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": "ASIAKUBESIMEXAMPLE",
                                "SecretAccessKey": "kubesim-node-secret", "Token": "kubesim-node-token"})
    if path in ("/", "/latest/meta-data", "/latest/meta-data/"):
        return 200, "ami-id\nhostname\niam/\ninstance-id\nlocal-ipv4\n"
    return 404, "Not Found"


class PodDialer:
    """Routes one pod's connections over the store (policies, pods, Services) and the kubelet (workload ports)."""

    def __init__(self, store, kubelet):
        self.store, self.kubelet = store, kubelet

    def resolve(self, source: Source, host: str) -> str | Route:
        """The address of host (an IP is itself), or a Route telling why it does not resolve."""
        try:
            return str(ipaddress.ip_address(host))
        except ValueError:
            pass
        if host == "localhost":  # /etc/hosts
            return "127.0.0.1"
        if not connection_allowed(self.store, source, CLUSTER_DNS, DNS_PORT):
            return Route(UNRESOLVED, f"Could not resolve host: {host} (DNS lookup timed out)")
        parts = host.rstrip(".").split(".")
        suffix = parts[2:]
        if len(parts) > 1 and suffix not in ([], ["svc"], ["svc", "cluster", "local"]):
            return Route(UNRESOLVED, f"Could not resolve host: {host}")
        name, namespace = parts[0], (parts[1] if len(parts) > 1 else source.namespace)
        try:
            service = self.store.get("v1/services", namespace, name)
        except ApiError:
            return Route(UNRESOLVED, f"Could not resolve host: {host}")
        ip = (service.get("spec") or {}).get("clusterIP")
        return ip if ip and ip != "None" else Route(UNRESOLVED, f"Could not resolve host: {host}")

    def route(self, source: Source, host: str, port: int, path: str) -> Route:
        address = self.resolve(source, host)
        if isinstance(address, Route):
            return address
        pods, _ = self.store.list("v1/pods")
        own = ipaddress.ip_address(address).is_loopback
        pod = next((p for p in pods if (p.get("status") or {}).get("podIP") == (source.ip if own else address)), None)
        if own:  # the pod's own loopback: no policy filters it
            return self._to_pod(None, pod, port, host, path) if pod else _refused(host, port)
        if pod is not None:
            return self._to_pod(source, pod, port, host, path)
        services, _ = self.store.list("v1/services")
        service = next((s for s in services if (s.get("spec") or {}).get("clusterIP") == address), None)
        if service is not None:
            return self._to_service(source, service, port, host, path)
        if not connection_allowed(self.store, source, Source(address), port):
            return _dropped(host, port)
        status, body = metadata_answer(path) if address == METADATA_ADDRESS else (
            200, f"kubesim outside network: {address}:{port} answered {path}\n")
        return Route(status=status, body=body)

    def _to_service(self, source: Source, service: dict, port: int, host: str, path: str) -> Route:
        spec = service.get("spec") or {}
        declared = next((p for p in spec.get("ports") or [] if p.get("port") == port), None)
        if declared is None or not spec.get("selector"):
            return _refused(host, port)
        selector = ",".join(f"{k}={v}" for k, v in sorted(spec["selector"].items()))
        namespace = service["metadata"].get("namespace") or "default"
        pods, _ = self.store.list("v1/pods", namespace, label_selector=selector)
        ready = [p for p in pods if self.kubelet.is_ready(namespace, p["metadata"]["name"])]
        if not ready:
            return _refused(host, port)
        return self._to_pod(source, ready[0], declared.get("targetPort", port), host, path)

    def _to_pod(self, source: Source | None, pod: dict, port: int | str, host: str, path: str) -> Route:
        number, name = port_number_and_name(pod, port)
        if source is not None and not ingress_allowed(self.store, pod, source, number, name):
            return _dropped(host, number or port)
        declared = {str(p.get("containerPort")) for c in (pod.get("spec") or {}).get("containers") or []
                    for p in c.get("ports") or []}
        local = self.kubelet.port(pod["metadata"].get("namespace") or "default", pod["metadata"]["name"], number)
        if str(number) not in declared or local is None:
            return _refused(host, number or port)
        return Route(local_url=f"http://127.0.0.1:{local}{path}")
