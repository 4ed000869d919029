"""What the API server's own endpoints (proxies, logs, exec, port-forward) need from the cluster.

A real kube-apiserver reaches kubelets and pod IPs over the network and links no kubelet code; kubesim's
API server likewise only knows these interfaces, and the cluster assembly passes in the objects that
implement them (kubesim/cluster/kubelet_api.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from kubesim.workload import Endpoint


class ExecResult(Protocol):
    stdout: str
    stderr: str
    exit_code: int


class Kubelets(Protocol):
    """The kubelet API of the node a pod runs on."""

    def logs(self, namespace: str, name: str, container: str | None, previous: bool) -> list[str] | None:
        """A container's log lines, or None when it is not running there."""

    def pod_port(self, namespace: str, name: str, port: str | int | None) -> int | None:
        """The loopback port the pod proxy reaches for a pod's port (number, name or None), None if closed."""

    def forward_port(self, namespace: str, name: str, port: int) -> int | None:
        """The loopback port behind a container port for port-forward, None when nothing listens."""

    def exec_in(self, pod: dict, container: str) -> Callable[[list[str]], ExecResult]:
        """A runner of commands in the container; raises ApiError (400) when the container is not running."""


class PodNetwork(Protocol):
    """The pod network as the proxies see it: ready endpoints and the NetworkPolicies on the way."""

    source_header: str  # names the pod a proxied request comes from; never forwarded to the workload

    def ready_endpoints(self, namespace: str, label_selector: str, port: int | str | None = None) -> list[Endpoint]:
        """Ready pods behind a selector, with the loopback address of `port`."""

    def source(self, header: str | None) -> object:
        """Where a request comes from (the header's pod, else the API server); ApiError (400) when malformed."""

    def admits(self, pod: dict, source: object, port: int | str | None) -> bool:
        """Whether the NetworkPolicies of the pod's namespace let `source` reach `port` of it."""

    def refused(self, pod: dict, port: int | str | None) -> Exception:
        """The ApiError the proxy answers with for traffic the policies drop."""
