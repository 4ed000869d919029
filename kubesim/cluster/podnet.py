"""Pod addresses reachable from the host (`kubesim serve --pod-network loopback`).

Pods then get their IPs in 127.<n>.<node>.0/24 (a random <n> per cluster that nothing on the host listens
on, claimed while the cluster runs, so parallel clusters do not collide: `pod_prefix`), and the kubelet
listens on `podIP:containerPort` for every port a container declares, relaying each connection byte for
byte to the loopback port its simulated workload serves. A client such as the inference gateway connects to
a pod exactly as it would on a real cluster's pod network, without the API server in the path; closing the
connection closes the workload's, so an engine aborts the request.

NetworkPolicy is enforced on these connections by source address (kubesim/cluster/netpol.py): a peer whose
address is a pod's IP is that pod (bind a pod's IP as the local address to speak as it); any other address
is the host, i.e. the node, whose traffic to its pods NetworkPolicy never filters (as in Kubernetes).
A dropped connection is closed at once (a real cluster drops the packets and the dial times out).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import socket

from kubesim.cluster.netpol import Source, ingress_allowed

log = logging.getLogger(__name__)

LOOPBACK = "loopback"
OVERLAY = "overlay"
POD_NETWORKS = (OVERLAY, LOOPBACK)
_CHUNK = 64 * 1024


_TAKEN: dict[int, socket.socket] = {}  # second octets this process's clusters hold, with their claims
_CLAIM = (255, 254, 47)  # 127.<n>.255.254:47 (no node has ordinal 255): the listener that holds <n>


def _listening_octets() -> set[int]:
    """Second octets of 127.x.y.z addresses something on this host listens on (Linux's /proc/net/tcp):
    another kubesim's pods or its claim, in this process or another."""
    octets = set()
    try:
        with open("/proc/net/tcp") as table:
            next(table)
            for line in table:
                fields = line.split()
                if len(fields) > 3 and fields[3] == "0A":  # LISTEN
                    address = bytes.fromhex(fields[1].split(":")[0])[::-1]  # little-endian IPv4
                    if address[0] == 127:
                        octets.add(address[1])
    except OSError:
        pass
    return octets


def _claim(n: int) -> socket.socket | None:
    """A listener on 127.<n>.255.254:47, or None if another process holds it: two kubesims that read the
    host's table before either's pods listen would otherwise pick the same <n>, and a pod of one would reach
    the other's engine (a gateway test met "model ... does not exist" from a parallel test's engine)."""
    claim = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        claim.bind((f"127.{n}.{_CLAIM[0]}.{_CLAIM[1]}", _CLAIM[2]))
        claim.listen(1)
    except OSError:
        claim.close()
        return None
    return claim


def pod_prefix(network: str) -> str:
    """The first two octets of the cluster's pod addresses: on the loopback network a 127.<n> that no other
    cluster on this host holds (a claim listener, `_claim`) and nothing on the host listens on, so parallel
    clusters never share a pod address; `release_prefix` gives it back when the cluster stops."""
    if network != LOOPBACK:
        return "10.244"
    taken = set(_TAKEN) | _listening_octets()  # read once: the host's table has thousands of lines on a busy machine
    free = [n for n in range(16, 250) if n not in taken]
    random.SystemRandom().shuffle(free)
    for n in free:
        claim = _claim(n)
        if claim is not None:
            _TAKEN[n] = claim
            return f"127.{n}"
    raise RuntimeError("no free 127.<n> prefix for a loopback pod network: every one from 16 to 249 is in use")


def release_prefix(prefix: str) -> None:
    """Give back a loopback prefix `pod_prefix` claimed (nothing for an overlay one)."""
    first, _, second = prefix.partition(".")
    if first == "127" and (claim := _TAKEN.pop(int(second), None)) is not None:
        claim.close()


def is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


class PodListeners:
    """The listeners of every running pod whose IP is a loopback address (none on an overlay network)."""

    def __init__(self, store, runtimes: dict):
        self.store = store
        self.runtimes = runtimes  # the kubelet's (namespace, name) -> PodRuntime
        self.servers: dict[tuple[str, str], list[asyncio.base_events.Server]] = {}

    async def expose(self, runtime) -> None:
        """Listen on the pod's IP for each declared container port (once per pod; idempotent)."""
        key = (runtime.namespace, runtime.name)
        if key in self.servers or not is_loopback(runtime.pod_ip):
            return
        self.servers[key] = []
        for container in runtime.containers:
            for declared in container.spec.get("ports") or []:
                port = declared.get("containerPort")
                if not isinstance(port, int) or (declared.get("protocol") or "TCP") != "TCP":
                    continue
                handler = self._handler(runtime, container, port, declared.get("name"))
                try:
                    server = await asyncio.start_server(handler, runtime.pod_ip, port)
                except OSError as error:
                    log.warning("pod %s/%s: cannot listen on %s:%s: %s", *key, runtime.pod_ip, port, error)
                    continue
                self.servers[key].append(server)

    def close(self, key: tuple[str, str]) -> None:
        for server in self.servers.pop(key, []):
            server.close()

    def source(self, ip: str) -> Source | None:
        """The pod that has address `ip`, or None for the host."""
        for runtime in list(self.runtimes.values()):
            if runtime.pod_ip == ip:
                labels = runtime.pod["metadata"].get("labels") or {}
                return Source(ip, runtime.namespace, tuple(sorted(labels.items())))
        return None

    def _handler(self, runtime, container, port: int, port_name: str | None):
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = (writer.get_extra_info("peername") or ("",))[0]
            source = self.source(peer)
            admitted = source is None or ingress_allowed(self.store, runtime.pod, source, port, port_name)
            if not admitted or container.port is None or container.workload is None:
                writer.close()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", container.port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

        return handle


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until either side ends, then close the writing side (a client gone closes the workload's)."""
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
