"""One pod on the kubelet: its containers through ContainerCreating -> Running -> Ready, kept running.

Each container gets a workload from kubesim/cluster/generic_workload.py (a simulated engine or the generic one) that
listens on a real loopback port; readiness comes after the workload's `startup_seconds()` (capped by
`--fast-start`) and, when the container has an HTTP readiness probe, once the probe answers 2xx.
A workload that exits (WorkloadExit, or a crash fault) is restarted with exponential back-off and the
pod shows CrashLoopBackOff meanwhile. Logs of the current and previous container are kept for
`kubectl logs` (and `--previous`). `kubesim.cluster.kubelet.Kubelet` holds one PodRuntime per bound pod.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from capacity.startup import PHASE_REASONS, Phases, phase_message
from kubesim.apiserver.quantities import pod_resources
from kubesim.cluster.containerenv import ContainerConfigError, env_sources, qos_class, resolve_env, source_data
from kubesim.cluster.events import now
from kubesim.cluster.generic_workload import resolve
from kubesim.cluster.nodes import node_class, node_gpu_key
from kubesim.cluster.pod_status import pod_ready_conditions
from kubesim.cluster.probes import initial_delay, period, run_probe
from kubesim.cluster.weights import FilledCaches
from kubesim.workload import ClusterView, PodContext, Workload, WorkloadExit, WorkloadFactory

log = logging.getLogger(__name__)

COMPONENT = "kubelet"
MAX_BACKOFF_SECONDS = 300.0


@dataclass
class KubeletConfig:
    """Timings of the simulated kubelet; `fast_start` shrinks all of them for tests and demos."""

    fast_start: bool = False
    seed: int = 0
    image_pull_seconds: float = 0.4
    backoff_base_seconds: float = 10.0
    fast_ready_cap_seconds: float = 0.5
    models_dir: str | None = None  # where cpu-real nodes find models (their volumes' mount paths map here)

    def pull_delay(self) -> float:
        return 0.05 if self.fast_start else self.image_pull_seconds

    def ready_delay(self, workload: Workload) -> float:
        seconds = max(0.0, float(workload.startup_seconds()))
        return min(seconds, self.fast_ready_cap_seconds) if self.fast_start else seconds

    def backoff(self, restarts: int) -> float:
        base = 1.0 if self.fast_start else self.backoff_base_seconds
        return min(base * 2 ** max(restarts - 1, 0), MAX_BACKOFF_SECONDS)


@dataclass
class ContainerRuntime:
    """One container of a pod: its workload, port, state and the logs of this and the previous run."""

    spec: dict
    workload: Workload | None = None
    port: int | None = None
    state: dict = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    started_ready: bool = False  # became Ready at least once since this start
    restart_count: int = 0
    logs: list[str] = field(default_factory=list)
    previous_logs: list[str] | None = None
    container_id: str = ""
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int = 0
    exit_message: str = ""
    env: dict[str, str] = field(default_factory=dict)  # resolved environment of the running container (exec)

    @property
    def name(self) -> str:
        return self.spec["name"]

    def current_logs(self) -> list[str]:
        lines = list(self.logs)
        if self.workload is not None:
            lines.extend(self.workload.logs())
        return lines

    def status(self) -> dict:
        image = self.spec.get("image", "")
        status = {
            "name": self.name,
            "image": image,
            "imageID": f"{image}@sha256:{hashlib.sha256(image.encode()).hexdigest()}",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


class PodHost(Protocol):
    """What a pod runtime needs of the kubelet that runs it (`kubesim.cluster.kubelet.Kubelet`)."""

    api: Any  # the kubelet's ClusterApi view of the store
    recorder: Any  # EventRecorder
    config: KubeletConfig
    cluster_view: ClusterView | None
    workload_for: WorkloadFactory | None
    filled_caches: FilledCaches

    def session(self) -> aiohttp.ClientSession: ...

    def node_ip(self, node: dict) -> str: ...

    def release_ip(self, node: dict, key: tuple[str, str]) -> None: ...

    async def publish(self, runtime: PodRuntime) -> None: ...


class PodRuntime:
    """Everything the kubelet runs for one pod."""

    def __init__(self, kubelet: PodHost, pod: dict, node: dict):
        self.kubelet = kubelet
        self.namespace = pod["metadata"].get("namespace") or "default"
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"].get("uid", "")
        self.pod = pod
        self.node = node
        self.node_name = node["metadata"]["name"]
        self.containers = [ContainerRuntime(spec) for spec in pod["spec"].get("containers") or []]
        self.pod_ip = kubelet.allocate_ip(self.node, (self.namespace, self.name))
        self.start_time = now()
        self.phase = "Pending"
        self.task: asyncio.Task | None = None
        self.side_tasks: set[asyncio.Task] = set()
        self.stopping = False

    # --- status -----------------------------------------------------------------------------------

    def ready(self) -> bool:
        return bool(self.containers) and all(c.ready for c in self.containers)

    def status(self, previous: dict) -> dict:
        ready = self.ready()
        reason = None if ready else "ContainersNotReady"
        status = dict(previous)
        status.update(
            {
                "phase": self.phase,
                "conditions": pod_ready_conditions(ready, reason, now(), previous.get("conditions") or []),
                "hostIP": self.kubelet.node_ip(self.node),
                "hostIPs": [{"ip": self.kubelet.node_ip(self.node)}],
                "podIP": self.pod_ip,
                "podIPs": [{"ip": self.pod_ip}],
                "startTime": self.start_time,
                "containerStatuses": [c.status() for c in self.containers],
                "qosClass": qos_class(self.pod),
            }
        )
        status.pop("reason", None)
        status.pop("message", None)
        return status

    async def publish(self) -> None:
        await self.kubelet.publish(self)

    async def event(
        self, reason: str, message: str, event_type: str = "Normal", container: ContainerRuntime | None = None
    ) -> None:
        field_path = f"spec.containers{{{container.name}}}" if container else None
        await self.kubelet.recorder.record(self.pod, reason, message, event_type, COMPONENT, self.node_name, field_path)

    # --- lifecycle --------------------------------------------------------------------------------

    async def context(self, container: ContainerRuntime) -> PodContext:
        """The PodContext of a container; ContainerConfigError when its env references are missing."""
        meta = self.pod["metadata"]
        limits = pod_resources({"spec": {"containers": [container.spec]}}, "limits")
        gpu_count = sum(units for name, units in limits.items() if name.endswith("/gpu"))
        sources = {}
        for kind, name in env_sources(container.spec):
            sources[(kind, name)] = source_data(await self.kubelet.api.get(f"v1/{kind}", self.namespace, name))
        env = resolve_env(
            container.spec, self.pod, self.pod_ip, self.node_name, self.kubelet.node_ip(self.node), sources
        )
        return PodContext(
            namespace=self.namespace,
            pod_name=self.name,
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            container=container.spec,
            env=env,
            gpu_key=node_gpu_key(self.node),
            gpu_count=gpu_count,
            seed=self.kubelet.config.seed + int(hashlib.sha256(self.uid.encode()).hexdigest()[:8], 16),
            fast_start=self.kubelet.config.fast_start,
            cluster=self.kubelet.cluster_view,
            node_class=node_class(self.node),
            models_dir=self.kubelet.config.models_dir,
            weights_cache=self.kubelet.filled_caches.cache_for(self.pod, self.node),
        )

    async def run(self) -> None:
        await self.publish()
        for container in self.containers:
            image = container.spec.get("image", "")
            await self.event("Pulling", f'Pulling image "{image}"', container=container)
        await asyncio.sleep(self.kubelet.config.pull_delay())
        for container in self.containers:
            image = container.spec.get("image", "")
            pulled = f"{self.kubelet.config.pull_delay():.3f}s"
            await self.event(
                "Pulled",
                f'Successfully pulled image "{image}" in {pulled} ({pulled} including waiting). '
                f'Image size: {8 * 10**9 + int(hashlib.sha256(image.encode()).hexdigest()[:7], 16)} bytes.',
                container=container,
            )
        await asyncio.gather(*(self.run_container(c) for c in self.containers))

    async def run_container(self, container: ContainerRuntime) -> None:
        """Start, watch for exit, restart with back-off, forever (restartPolicy Always/OnFailure)."""
        policy = self.pod["spec"].get("restartPolicy") or "Always"
        while not self.stopping:
            if await self.start_container(container):
                await container.exited.wait()
                if self.stopping:
                    return
            if policy == "Never" or (policy == "OnFailure" and container.exit_code == 0):
                self.phase = "Failed" if container.exit_code else "Succeeded"
                await self.publish()
                return
            container.restart_count += 1  # only a container that is started again counts a restart
            self.phase = "Running"  # a restarting container keeps the pod Running (STATUS CrashLoopBackOff)
            delay = self.kubelet.config.backoff(container.restart_count)
            container.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={container.name} "
                    f"pod={self.name}_{self.namespace}({self.uid})",
                }
            }
            await self.publish()
            await self.event(
                "BackOff",
                f"Back-off restarting failed container {container.name} in pod "
                f"{self.name}_{self.namespace}({self.uid})",
                "Warning",
                container,
            )
            await asyncio.sleep(delay)

    async def start_container(self, container: ContainerRuntime) -> bool:
        """Start the container's workload; False when it exits at once (bad flags, missing model...)."""
        container.exited.clear()
        container.ready = container.started = container.started_ready = False
        seed = f"{self.uid}/{container.name}/{time.time()}".encode()
        container.container_id = f"containerd://{hashlib.sha256(seed).hexdigest()}"
        ctx = await self.wait_for_config(container)
        container.env = dict(ctx.env)
        await self.event("Created", f"Created container: {container.name}", container=container)
        workload = resolve(ctx, self.kubelet.workload_for)
        container.workload = workload
        container.logs = []
        try:
            container.port = await workload.start()
        except WorkloadExit as exit_:
            container.logs = list(exit_.logs)
            container.workload = None
            await self.terminated(container, exit_.exit_code, exit_.message)
            return False
        except Exception as error:
            log.exception("workload of %s/%s failed to start", self.namespace, self.name)
            container.logs = [f"fatal: {error!r}"]
            container.workload = None
            await self.terminated(container, 1, repr(error))
            return False
        await self.event("Started", f"Started container {container.name}", container=container)
        container.started = True
        container.state = {"running": {"startedAt": now()}}
        self.phase = "Running"
        await self.publish()
        for watch in (self.become_ready(container, workload), self.watch_exit(container, workload)):
            task = asyncio.get_running_loop().create_task(watch)
            self.side_tasks.add(task)
            task.add_done_callback(self.side_tasks.discard)
        return True

    async def watch_exit(self, container: ContainerRuntime, workload: Workload) -> None:
        """Record the exit of a workload whose process ends by itself (a real engine), so it is restarted."""
        until_exit = getattr(workload, "until_exit", None)
        if until_exit is None:
            return
        code, message = await until_exit()
        if container.workload is workload and not self.stopping:
            await self.kill(container, code, message)

    async def wait_for_config(self, container: ContainerRuntime) -> PodContext:
        """The container's context once its ConfigMaps and Secrets exist (CreateContainerConfigError until then)."""
        while True:
            try:
                return await self.context(container)
            except ContainerConfigError as error:
                state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}}
                if container.state != state:
                    container.state = state
                    await self.publish()
                await self.event("Failed", f"Error: {error}", "Warning", container)
                await asyncio.sleep(1.0 if self.kubelet.config.fast_start else 5.0)

    async def become_ready(self, container: ContainerRuntime, workload: Workload) -> None:
        """Ready after the workload's start-up delay and a passing readiness probe; then keep probing:
        failing readiness takes the container out of Ready, failing liveness restarts it."""
        started = time.monotonic()
        until_ready = getattr(workload, "until_ready", None)
        phases = getattr(workload, "startup_phases", lambda: None)()
        if until_ready is not None:
            await until_ready()
        elif phases is not None:
            await self.run_phases(container, workload, phases)
        else:
            await asyncio.sleep(self.kubelet.config.ready_delay(workload))
        readiness = container.spec.get("readinessProbe")
        liveness = container.spec.get("livenessProbe")
        if readiness is None:
            container.ready = True
            await self.publish()
        if readiness is None and liveness is None:
            return
        passes = failures = live_failures = 0
        fast = self.kubelet.config.fast_start
        while container.workload is workload and not container.exited.is_set() and not self.stopping:
            if readiness is not None:
                ok, detail = await self.probe(container, readiness)
                if ok:
                    passes, failures = passes + 1, 0
                    # The first success makes a starting container Ready; later ones need successThreshold.
                    needed = 1 if not container.started_ready else int(readiness.get("successThreshold") or 1)
                    if not container.ready and passes >= needed:
                        container.ready = container.started_ready = True
                        await self.publish()
                else:
                    passes, failures = 0, failures + 1
                    await self.event("Unhealthy", f"Readiness probe failed: {detail}", "Warning", container)
                    if container.ready and failures >= int(readiness.get("failureThreshold") or 3):
                        container.ready = False
                        await self.publish()
            if liveness is not None and time.monotonic() - started >= initial_delay(liveness, fast):
                ok, detail = await self.probe(container, liveness)
                live_failures = 0 if ok else live_failures + 1
                if not ok:
                    await self.event("Unhealthy", f"Liveness probe failed: {detail}", "Warning", container)
                if live_failures >= int(liveness.get("failureThreshold") or 3):
                    await self.event(
                        "Killing",
                        f"Container {container.name} failed liveness probe, will be restarted",
                        container=container,
                    )
                    await self.kill(container, 137, "liveness probe failed")
                    return
            periods = [period(p, fast) for p in (readiness, liveness) if p is not None]
            if readiness is not None and not container.ready and fast:
                periods.append(0.2)  # --fast-start: do not make a loading engine wait a whole period
            await asyncio.sleep(min(periods))

    async def run_phases(self, container: ContainerRuntime, workload: Workload, phases: Phases) -> None:
        """Sleep through the start-up phases (scaled to the workload's start-up delay) with an Event as each ends;
        the first download fills the cluster cache for the pods after it."""
        scale = self.kubelet.config.ready_delay(workload) / max(phases.total_s, 1e-9)
        for name, seconds in phases.as_list():
            if name == "pull":
                continue  # the kubelet's own Pulling/Pulled
            await asyncio.sleep(seconds * scale)
            if container.workload is not workload or self.stopping:
                return
            await self.event(PHASE_REASONS[name], phase_message(phases, name), container=container)
            if name == "download":
                self.kubelet.filled_caches.fill(self.pod)

    async def probe(self, container: ContainerRuntime, probe: dict) -> tuple[bool, str]:
        return await run_probe(probe, session=self.kubelet.session, pod_ip=self.pod_ip, port=container.port,
                               workload=container.workload)

    async def terminated(self, container: ContainerRuntime, exit_code: int, message: str) -> None:
        """Record a container exit: terminated state, logs moved to previous, Warning event."""
        stamp = now()
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "message": message,
                "startedAt": (container.state.get("running") or {}).get("startedAt", stamp),
                "finishedAt": stamp,
                "containerID": container.container_id,
            }
        }
        container.state = state
        container.last_state = state
        container.ready = container.started = False
        container.previous_logs = container.current_logs()
        container.exit_code = exit_code
        container.exit_message = message
        await self.publish()
        if exit_code:
            await self.event(
                "Failed",
                f"Error: container {container.name} exited with code {exit_code}: {message}",
                "Warning",
                container,
            )

    async def crash(self, container_name: str | None) -> bool:
        """Kill a running container as if it crashed (exit code 1); it restarts with back-off."""
        for container in self.containers:
            if container_name in (None, container.name) and container.workload is not None:
                await self.kill(
                    container, 1, "simulated crash (kubesim fault)", "panic: simulated crash (kubesim fault)"
                )
                return True
        return False

    async def kill(
        self, container: ContainerRuntime, exit_code: int, message: str, last_line: str | None = None
    ) -> None:
        """Stop the container's workload and record the exit; run_container restarts it."""
        workload = container.workload
        if workload is None:
            return
        container.logs = [*container.current_logs(), *([last_line] if last_line else [])]
        container.workload = None
        await workload.stop()
        await self.terminated(container, exit_code, message)
        container.exited.set()

    async def stop(self) -> None:
        self.stopping = True
        tasks = [t for t in [self.task, *self.side_tasks] if t is not None and t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        for container in self.containers:
            container.exited.set()
            if container.workload is not None:
                try:
                    await container.workload.stop()
                except Exception:
                    log.debug("stopping %s/%s failed", self.namespace, self.name, exc_info=True)
                container.workload = None
        await asyncio.gather(*tasks, return_exceptions=True)
        self.kubelet.release_ip(self.node, (self.namespace, self.name))

    def port_for(self, port: str | int | None) -> int | None:
        """The loopback port of the container that serves `port` (number or name), else the first one."""
        chosen = None
        for container in self.containers:
            for declared in container.spec.get("ports") or []:
                names = (str(declared.get("containerPort")), declared.get("name"))
                if port is not None and str(port) in names:
                    chosen = container
        chosen = chosen or next((c for c in self.containers if c.port is not None), None)
        return chosen.port if chosen is not None and chosen.workload is not None else None
