"""The real vLLM (CPU build) in a kubesim cpu-real node, shared by the whole test session (docs/real-engines.md).

`real_engine` (tests/conftest.py) starts one kubesim cluster with a cpu-real node, writes a tiny model and two
adapters with `python -m kubesim tiny-model`/`tiny-adapter`, and runs one engine Deployment of it until Ready;
tests read it through the API server's pod proxy, as telemetry does. Starting a real engine costs 30-110 s and
3 GB, so the session has one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from apps.serving.rendering.localsource import local_volume
from bench.real_engine import SERVED, engine_args
from kubesim.cluster.nodes import CPU_REAL, CPU_REAL_TAINT, NODE_CLASS_LABEL
from tests.polling import wait_for
from tests.simcluster import ClusterHandle

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "vllm/vllm-openai:v0.32.0"
MODEL = SERVED  # the served model name
ADAPTERS = ("tiny-sql", "tiny-chat")
NAMESPACE = "default"
PORT = 8000
READY_SECONDS = 240  # a loaded two-core machine has taken 130 s; under pytest-timeout's 300 s with the models made
# The session engine's arguments besides model, host and port: bench/real_engine.py's (a KV pool of 24 blocks of
# 32 tokens, prefix caching, LoRA), so that the bench can run against it and a simulated twin gets the same.
ENGINE_ARGS = engine_args()


def make_models(root: Path) -> Path:
    """A tiny model under root/tiny and its adapters under root/adapters/NAME; returns root."""
    commands = [["tiny-model", "--out", str(root / "tiny")]]
    commands += [["tiny-adapter", "--model", str(root / "tiny"), "--out", str(root / "adapters" / name),
                  "--seed", str(seed)] for seed, name in enumerate(ADAPTERS, start=1)]
    for command in commands:
        subprocess.run([sys.executable, "-m", "kubesim", *command], cwd=ROOT, check=True, capture_output=True,
                       timeout=300)
    return root


def engine_deployment(name: str, args: list[str] = (), memory: str = "3Gi", env: dict | None = None) -> dict:
    """A vLLM engine Deployment for the cpu-real node, as the renderer writes one (model on a /models volume, and
    the renderer's mount of the node's folder for `local://` sources, which the kubelet maps to the same models)."""
    local, local_mount = local_volume()
    container = {
        "name": "engine", "image": IMAGE, "command": ["vllm", "serve"],
        "args": ["--model", "/models/tiny", "--host", "0.0.0.0", "--port", str(PORT), *args],
        "ports": [{"name": "http", "containerPort": PORT}],
        "resources": {"requests": {"cpu": "500m", "memory": memory}, "limits": {"memory": memory}},
        "volumeMounts": [{"name": "model-cache", "mountPath": "/models", "readOnly": True}, local_mount],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 5},
    }
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": {NODE_CLASS_LABEL: CPU_REAL},
                     "tolerations": [{"key": CPU_REAL_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                     "containers": [container],
                     "volumes": [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "models"}},
                                 local]}}},
    }


def _body(data: bytes) -> dict:
    """A JSON answer, or {"text": ...} for vLLM's plain-text ones (loading an adapter)."""
    try:
        return json.loads(data)
    except ValueError:
        return {"text": data.decode()}


@dataclass
class RealEngine:
    """The session's real engine: its cluster, pod and the pod proxy's base URL."""

    cluster: ClusterHandle
    pod: str
    models: Path

    @property
    def url(self) -> str:
        return f"{self.cluster.url}/api/v1/namespaces/{NAMESPACE}/pods/{self.pod}:{PORT}/proxy"

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return response.read().decode()

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, _body(response.read())
        except urllib.error.HTTPError as error:
            return error.code, _body(error.read())


def pods_of(cluster: ClusterHandle, app: str) -> list:
    return cluster.core.list_namespaced_pod(NAMESPACE, label_selector=f"app={app}").items


def start_engine(cluster: ClusterHandle, models: Path) -> RealEngine:
    """Create the engine Deployment and wait until its pod is Ready."""
    # VLLM_ENABLE_V1_MULTIPROCESSING=0: the CPU build's model runner in the engine-core process instead of a
    # third process of its own: the same server, engine core, flags and metrics, ready in 17.4 s of CPU instead
    # of 25.1 s (tests/realengine.py's start on this machine, measured with psutil).
    env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    cluster.apps.create_namespaced_deployment(NAMESPACE, engine_deployment("tiny", env=env, args=ENGINE_ARGS))

    def ready_pod():
        for pod in pods_of(cluster, "tiny"):
            if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
                return pod.metadata.name
        return None

    return RealEngine(cluster, wait_for(ready_pod, timeout=READY_SECONDS, interval=1.0, message="the real engine"),
                      models)
