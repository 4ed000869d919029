"""The simulated GPU cluster behind kubesim's API server: nodes, scheduler, controllers, kubelet,
proxies and faults, wired onto a `kubesim.apiserver.server.Server`.

    server = Server(port=0, seed=1)
    cluster = Cluster(server, ClusterConfig(nodes="h100-sxm-80gb:1x8,l4-24gb:2x1", fast_start=True))
    cluster.install()          # before server.start(): admission, routes, middleware, background task
    await server.start()

Everything runs on the server's event loop and talks to the store in-process (kubesim/cluster/controllers/api.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kubesim import engines
from kubesim.apiserver.admission.chain import PLUGINS as ADMISSION_PLUGINS
from kubesim.apiserver.admission.quota import QUOTAS
from kubesim.apiserver.proxy import Proxies, RoutingPolicy
from kubesim.apiserver.selectors import parse_label_selector
from kubesim.apiserver.streaming import Streaming
from kubesim.cluster.controllers.api import ClusterApi
from kubesim.cluster.controllers.autoscaler import HPAS, HorizontalPodAutoscalerController
from kubesim.cluster.controllers.base import Informer
from kubesim.cluster.controllers.deployment import DEPLOYMENTS, DeploymentController
from kubesim.cluster.controllers.disruption import PDBS, DisruptionController, eviction_route
from kubesim.cluster.controllers.endpoints import ENDPOINTS, EndpointsController
from kubesim.cluster.controllers.garbagecollector import GarbageCollector
from kubesim.cluster.controllers.job import JOBS, JobController
from kubesim.cluster.controllers.kueue import POD_PRIORITY_CLASSES, KueueController
from kubesim.cluster.controllers.leaderworkerset import LWS, LeaderWorkerSetController
from kubesim.cluster.controllers.namespace import NAMESPACES, NamespaceController
from kubesim.cluster.controllers.nodes import NODES, NodeLifecycle, register_nodes
from kubesim.cluster.controllers.quota import QuotaController
from kubesim.cluster.controllers.replicaset import REPLICASETS, ReplicaSetController
from kubesim.cluster.controllers.scheduling import Scheduler
from kubesim.cluster.controllers.statefulset import STATEFULSETS, StatefulSetController
from kubesim.cluster.dcgm import DcgmExporter, install_exporters, is_exporter
from kubesim.cluster.events import EventRecorder, expire_events
from kubesim.cluster.faults import FaultConfig, FaultInjector, admin_routes, fault_middleware
from kubesim.cluster.identities import bootstrap_rbac
from kubesim.cluster.kubelet import Kubelet, KubeletConfig
from kubesim.cluster.kubelet_api import KubeletApi, PodNetwork
from kubesim.cluster.kueue import kueue_webhook
from kubesim.cluster.kueue_crds import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    PRIORITY_CLASSES,
    RESOURCE_FLAVORS,
    WORKLOADS,
    kueue_crds,
)
from kubesim.cluster.model_agent import ModelAgent
from kubesim.cluster.netpol import api_server_objects
from kubesim.cluster.nodes import build_nodes
from kubesim.cluster.podnet import OVERLAY, POD_NETWORKS, PodListeners, pod_prefix, release_prefix
from kubesim.cluster.resource_metrics import ResourceMetrics
from kubesim.engines.real import admission_refusal
from kubesim.engines.routing import service_proxy_policies
from kubesim.workload import Endpoint

log = logging.getLogger(__name__)

PODS = "v1/pods"
SERVICES = "v1/services"
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"
EVENT_TTL_SECONDS = 3600.0
COMPONENT_HPA = "horizontal-pod-autoscaler"


@dataclass
class ClusterConfig:
    """What `python -m kubesim serve` passes down: node set, timings, seed and initial faults."""

    nodes: str | None = None
    fast_start: bool = False
    seed: int = 0
    faults: FaultConfig = field(default_factory=FaultConfig)
    dcgm_exporter: bool = False  # a dcgm-exporter pod per NVIDIA GPU node (`serve` turns it on)
    pod_network: str = OVERLAY  # `loopback`: pods' IPs are reachable from the host (kubesim/cluster/podnet.py)
    models_dir: str | None = None  # the host folder cpu-real nodes' model volumes map to (kubesim/engines/real.py)
    kueue: bool = True  # Kueue installed: its CRDs served, its webhook and controller running (`--no-kueue`)


class ClusterView:
    """The `kubesim.workload.ClusterView` routers use to find their backends."""

    def __init__(self, pods: Informer, kubelet: Kubelet):
        self.pods = pods
        self.kubelet = kubelet

    def ready_endpoints(self, namespace: str, label_selector: str, port: int | str | None = None) -> list[Endpoint]:
        match = parse_label_selector(label_selector) if label_selector else None
        out = []
        for pod in sorted(self.pods.list(namespace), key=lambda p: p["metadata"]["name"]):
            if match is not None and not match(pod):
                continue
            name = pod["metadata"]["name"]
            if not self.kubelet.is_ready(namespace, name):
                continue
            local = self.kubelet.port(namespace, name, port)
            if local is None:
                continue
            out.append(Endpoint(name, f"http://127.0.0.1:{local}", dict(pod["metadata"].get("labels") or {})))
        return out


class Cluster:
    """All cluster components of one kubesim server."""

    def __init__(self, server, config: ClusterConfig | None = None, *,
                 routing_policies: Mapping[str, RoutingPolicy] | None = None):
        """`routing_policies` adds service-proxy policies by name to the engines' own (tests use it)."""
        self.server = server
        self.config = config or ClusterConfig()
        self.pod_prefix = pod_prefix(self.config.pod_network)
        try:
            self.nodes = build_nodes(self.config.nodes, self.pod_prefix)  # fails fast on a bad --nodes
        except Exception:
            release_prefix(self.pod_prefix)
            raise
        self.rng = random.Random(self.config.seed)
        self.api = ClusterApi(server.store, access=server.access)  # components go through authorization too
        self.recorder = EventRecorder(self.api.as_manager("kubesim-events"))
        self.informers = {
            resource: Informer(self.api, resource)
            for resource in (
                PODS,
                NODES,
                DEPLOYMENTS,
                REPLICASETS,
                STATEFULSETS,
                LWS,
                SERVICES,
                ENDPOINTS,
                QUOTAS,
                PDBS,
                HPAS,
                JOBS,
                NAMESPACES,
                *((POD_PRIORITY_CLASSES, RESOURCE_FLAVORS, CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS, PRIORITY_CLASSES)
                  if self.config.kueue else ()),
            )
        }
        pods = self.informers[PODS]
        self.kubelet = Kubelet(
            self.api.as_manager("kubelet"),
            self.recorder,
            KubeletConfig(fast_start=self.config.fast_start, seed=self.config.seed, models_dir=self.config.models_dir),
            workload_for=self._workload_for,
        )
        self.kubelet.admission = admission_refusal
        self.kubelet.listeners = PodListeners(server.store, self.kubelet.runtimes)
        self.view = ClusterView(pods, self.kubelet)
        self.kubelet.cluster_view = self.view
        self.faults = FaultInjector(self.config.faults, seed=self.config.seed + 1)
        self.lifecycle = NodeLifecycle(self.api.as_manager("node-controller"), self.recorder, self.kubelet, pods)
        self.faults.on_nodes_changed = self.lifecycle.set_failed
        self.faults.on_crash = self.kubelet.crash
        manager = self.api.as_manager("kube-controller-manager")
        self.scheduler = Scheduler(self.api.as_manager("default-scheduler"), self.recorder, pods, self.informers[NODES])
        self.controllers = [
            self.scheduler,
            ReplicaSetController(manager, self.recorder, self.informers[REPLICASETS], pods, self.rng),
            DeploymentController(
                manager, self.recorder, self.informers[DEPLOYMENTS], self.informers[REPLICASETS], pods
            ),
            StatefulSetController(manager, self.recorder, self.informers[STATEFULSETS], pods),
            LeaderWorkerSetController(self.api.as_manager("lws-controller"), self.recorder, self.informers[LWS], pods),
            EndpointsController(manager, self.informers[SERVICES], pods, self.informers[ENDPOINTS]),
            QuotaController(manager, self.informers[QUOTAS], pods),
            DisruptionController(manager, self.informers[PDBS], pods),
            JobController(self.api.as_manager("job-controller"), self.recorder, self.informers[JOBS], pods, self.rng),
            ModelAgent(self.api.as_manager("model-agent"), self.recorder, self.config.fast_start),
            GarbageCollector(self.api.as_manager("generic-garbage-collector")),
            NamespaceController(self.api.as_manager("namespace-controller"), self.informers[NAMESPACES]),
        ]
        if self.config.kueue:
            self.controllers.append(KueueController(self.api.as_manager("kueue-controller-manager"), self.recorder,
                                                    self.informers))
        self.autoscaler = HorizontalPodAutoscalerController(
            self.api.as_manager(COMPONENT_HPA),
            self.recorder,
            self.informers[HPAS],
            pods,
            self.kubelet,
            sync_seconds=1.0 if self.config.fast_start else 15.0,
        )
        self.controllers.append(self.autoscaler)
        pods.handlers.append(self._kubelet_pod_changed)
        # The engines' routing policies are wired here, where the cluster is assembled: nothing registers on import.
        policies = {**service_proxy_policies(), **(routing_policies or {})}
        # The API server's own endpoints reach the kubelet and the pod network through these two.
        kubelets, network = KubeletApi(server.store, self.kubelet), PodNetwork(server.store, self.view)
        self.proxies = Proxies(server.store, kubelets, network, policies)
        self.streaming = Streaming(server.store, kubelets)  # kubectl exec and port-forward
        self.resource_metrics = ResourceMetrics(server.store, self.kubelet)  # kubectl top
        self._tasks: list[asyncio.Task] = []
        self._spawned: set[asyncio.Task] = set()
        self._kubelet_running = False
        self.ready: asyncio.Event | None = None  # set once nodes exist and controllers run

    def install(self) -> None:
        """Register admission, routes, the fault middleware and the cluster's background task."""
        if self.config.kueue:  # Kueue's mutating webhook runs before the built-in plugins see the pod
            self.server.add_admission_hook(kueue_webhook)
        for plugin in ADMISSION_PLUGINS:
            self.server.add_admission_hook(plugin)
        for method, path, handler in [*self.proxies.routes(), *self.streaming.routes(),
                                      eviction_route(self.server.store)]:
            self.server.add_route(method, path, handler)
        for route in admin_routes(self.faults):
            self.server.add_route(route.method, route.path, route.handler)
        self.server.add_middleware(fault_middleware(self.faults))
        self.resource_metrics.install(self.server)
        self.server.add_background_task(lambda _server: self.run())

    def _workload_for(self, ctx):
        """The simulated dcgm-exporter for its image, else what the engines run (None: the generic workload)."""
        if is_exporter(ctx):
            return DcgmExporter(ctx, self._node_of, self._gpu_readings)
        fault = self.faults.config.engine_fault_for(ctx.labels)
        return engines.workload_for(replace(ctx, fault=fault) if fault else ctx)

    def _node_of(self, namespace: str, name: str) -> str | None:
        runtime = self.kubelet.runtimes.get((namespace, name))
        return runtime.node_name if runtime is not None else None

    def _gpu_readings(self, node_name: str):
        node = self.informers[NODES].get("", node_name)
        if node is None:
            return []
        gpus = self.kubelet.gpus
        return [(d, gpus.read(d, self.kubelet.workload(*d.holder) if d.holder else None))
                for d in gpus.node_devices(node)]

    def _kubelet_pod_changed(self, event_type: str, pod: dict, _old: dict | None) -> None:
        if not self._kubelet_running:
            return  # run() starts the pods found at start once nodes and pods are both listed
        meta = pod["metadata"]
        key = (meta.get("namespace") or "default", meta["name"])
        loop = asyncio.get_running_loop()
        if event_type == "DELETED":
            runtime = self.kubelet.runtimes.get(key)
            if runtime is not None and runtime.uid == meta.get("uid"):
                self._spawn(loop.create_task(self.kubelet.remove_pod(*key)))
            return
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            return
        runtime = self.kubelet.runtimes.get(key)
        if runtime is not None and runtime.uid == meta.get("uid"):
            runtime.pod = pod
            return
        self._spawn(loop.create_task(self.kubelet.sync_pod(pod, self.informers[NODES].get("", node_name))))

    def _spawn(self, task: asyncio.Task) -> None:
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    async def _expire_events(self) -> None:
        """Drop Events older than an hour, as the apiserver does, so a long demo does not pile them up."""
        api = self.api.as_manager("kube-apiserver")
        while True:
            await asyncio.sleep(60)
            await expire_events(api, EVENT_TTL_SECONDS)

    async def run(self) -> None:
        """Register nodes, start informers, wait for their first lists, then run the controllers."""
        self.ready = asyncio.Event()
        try:
            apiserver = self.api.as_manager("kube-apiserver")
            for resource, obj in bootstrap_rbac():  # before any component calls, as the apiserver's bootstrap
                if await apiserver.get(resource, None, obj["metadata"]["name"]) is None:
                    await apiserver.create(resource, obj)
            await register_nodes(self.api.as_manager("kubelet"), self.nodes)
            if self.config.kueue:  # as `kubectl apply` of Kueue's manifests, before its controller watches them
                for crd in kueue_crds():
                    if await apiserver.get(CRDS, None, crd["metadata"]["name"]) is None:
                        await apiserver.create(CRDS, crd)
            for resource, obj in api_server_objects():  # where clients (and NetworkPolicies) find the API server
                if await apiserver.get(resource, "default", obj["metadata"]["name"]) is None:
                    await apiserver.create(resource, obj)
            if self.config.dcgm_exporter:
                await install_exporters(self.api.as_manager("gpu-operator"), self.nodes)
            for informer in self.informers.values():
                self._tasks.append(asyncio.ensure_future(informer.run()))
            for informer in self.informers.values():
                await informer.synced.wait()
            self._kubelet_running = True
            for pod in self.informers[PODS].list():  # e.g. restored from --state: run them again
                self._kubelet_pod_changed("ADDED", pod, None)
            for controller in self.controllers:
                self._tasks.append(asyncio.ensure_future(controller.run()))
            if self.config.faults.failed_nodes:
                await self.lifecycle.set_failed(set(self.config.faults.failed_nodes))
            self._tasks.append(asyncio.ensure_future(self._expire_events()))
            self._tasks.append(asyncio.ensure_future(self.autoscaler.tick()))
            self.ready.set()
            await asyncio.gather(*self._tasks)
        finally:
            for task in [*self._tasks, *self._spawned]:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self.kubelet.shutdown()
            await self.proxies.close()
            await self.autoscaler.close()
            release_prefix(self.pod_prefix)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The cluster's flags for `python -m kubesim serve`."""
    group = parser.add_argument_group("simulated cluster")
    group.add_argument(
        "--nodes",
        default=None,
        help="GPUKEY:COUNTxGPUS[,...] (e.g. h100-sxm-80gb:2x8,l4-24gb:4x1), cpu:COUNT and cpu-real:COUNT (nodes "
        "running the real vLLM, see --models-dir); "
        "default h100-sxm-80gb:1x8,l4-24gb:2x1,cpu:1",
    )
    group.add_argument("--fast-start", action="store_true", help="every pod Ready within a second")
    group.add_argument(
        "--fault-error-rate", type=float, default=0.0, help="probability that an API request fails with 500, 503 or 429"
    )
    group.add_argument("--fault-error-codes", default="500,503,429", help="codes injected errors pick from")
    group.add_argument("--fault-latency-ms", type=float, default=0.0, help="latency added to API requests")
    group.add_argument("--fault-latency-jitter-ms", type=float, default=0.0, help="random extra latency")
    group.add_argument(
        "--fault-watch-drop-seconds",
        type=float,
        default=None,
        help="cut every watch connection after this many seconds",
    )
    group.add_argument(
        "--fault-conflict-rate",
        type=float,
        default=0.0,
        help="probability that an update (PUT/PATCH) gets 409 Conflict",
    )
    group.add_argument("--fault-failed-nodes", default="", help="comma-separated nodes that start NotReady")
    group.add_argument("--pod-network", choices=POD_NETWORKS, default=OVERLAY,
                       help="loopback: pod IPs are 127.x addresses where the kubelet serves each declared container "
                            "port, so the host reaches pods directly (the inference gateway does)")
    group.add_argument("--models-dir", default=None,
                       help="host folder where cpu-real nodes find models: a path under an engine container's "
                            "volume mount is the same path under it (python -m kubesim tiny-model writes one)")
    group.add_argument("--no-dcgm-exporter", action="store_true",
                       help="do not run a simulated dcgm-exporter pod on each NVIDIA GPU node")
    group.add_argument("--no-kueue", action="store_true",
                       help="do not install Kueue (its CRDs, webhook and controller): a cluster without it")


def cluster_config_from_args(args: argparse.Namespace) -> ClusterConfig:
    """A ClusterConfig from parsed flags; a bad value raises ValueError with the reason."""
    faults = FaultConfig.from_dict(
        {
            "error_rate": args.fault_error_rate,
            "error_codes": [int(code) for code in args.fault_error_codes.split(",") if code.strip()],
            "latency_ms": args.fault_latency_ms,
            "latency_jitter_ms": args.fault_latency_jitter_ms,
            "watch_drop_seconds": args.fault_watch_drop_seconds,
            "conflict_rate": args.fault_conflict_rate,
            "failed_nodes": [name for name in args.fault_failed_nodes.split(",") if name.strip()],
        }
    )
    # Without --seed every run differs, as on a real cluster; with it, names and fault draws repeat.
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    build_nodes(args.nodes)  # a bad --nodes fails here, before the server starts
    return ClusterConfig(nodes=args.nodes, fast_start=args.fast_start, seed=seed, faults=faults,
                         dcgm_exporter=not args.no_dcgm_exporter, pod_network=args.pod_network,
                         models_dir=args.models_dir, kueue=not args.no_kueue)
