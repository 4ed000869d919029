"""kubectl exec and port-forward over WebSocket, with kubectl and the official client, against a simulated cluster."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request

import pytest
from kubernetes import client
from kubernetes.stream import portforward, stream

from tests.kubesim.cluster_support import GPU_TOLERATION, deployment_of, service_of
from tests.polling import wait_for
from tests.simcluster import cluster_starter

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
NS = "streaming"


@pytest.fixture(scope="module")
def cluster():
    with cluster_starter() as make:
        handle = make(nodes="h100-sxm-80gb:1x8", seed=5)
        core, apps = handle.core, handle.apps
        core.create_namespace({"metadata": {"name": NS}})
        core.create_namespaced_config_map(NS, {"metadata": {"name": "app-config"},
                                               "data": {"app.yaml": "mode: demo\n", "level": "debug"}})
        engine = {"name": "engine", "image": "vllm/vllm-openai:v0.33.0", "args": [LLAMA, "--max-model-len", "8192"],
                  "ports": [{"containerPort": 8000, "name": "http"}], "resources": {"limits": {"nvidia.com/gpu": "2"}}}
        pod_spec = {"tolerations": [GPU_TOLERATION], "containers": [engine]}
        apps.create_namespaced_deployment(NS, deployment_of("llama", 1, pod_spec, {"kubesim.io/time-scale": "5"}))
        core.create_namespaced_service(NS, service_of("llama", [{"port": 8000, "targetPort": 8000}]))
        core.create_namespaced_pod(NS, {"metadata": {"name": "web"}, "spec": {
            "containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 80}],
                            "env": [{"name": "GREETING", "value": "hello"},
                                    {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "app-config",
                                                                                        "key": "level"}}}],
                            "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}]}],
            "volumes": [{"name": "config", "configMap": {"name": "app-config"}}]}})

        def ready():
            pods = core.list_namespaced_pod(NS).items
            return len(pods) == 2 and all(
                any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or [])) for p in pods)

        wait_for(ready, timeout=120, message="engine and web pods Ready")
        yield handle


def _engine_pod(cluster) -> str:
    return cluster.core.list_namespaced_pod(NS, label_selector="app=llama").items[0].metadata.name


def _kubectl(cluster, *args, check=False):
    return cluster.kubectl("-n", NS, *args, check=check)


def test_kubectl_exec_lists_and_reads_files_and_env(cluster):
    out = _kubectl(cluster, "exec", "web", "--", "ls", "/etc/app", check=True).stdout
    assert out.split() == ["app.yaml", "level"]
    assert _kubectl(cluster, "exec", "web", "--", "cat", "/etc/app/app.yaml", check=True).stdout == "mode: demo\n"
    assert _kubectl(cluster, "exec", "web", "--", "cat", "/etc/hostname", check=True).stdout == "web\n"
    env = _kubectl(cluster, "exec", "web", "--", "env", check=True).stdout.splitlines()
    assert "GREETING=hello" in env and "LEVEL=debug" in env and "HOSTNAME=web" in env
    proc = _kubectl(cluster, "exec", "web", "--", "cat", "/etc/nope")
    assert proc.returncode == 1
    assert "cat: /etc/nope: No such file or directory" in proc.stderr


def test_unknown_command_exits_127_with_a_shells_message(cluster):
    proc = _kubectl(cluster, "exec", "web", "--", "wget", "localhost")
    assert proc.returncode == 127
    assert "sh: 1: wget: not found" in proc.stderr
    assert "command terminated with exit code 127" in proc.stderr
    proc = _kubectl(cluster, "exec", "web", "--", "nvidia-smi")  # no GPUs: the runtime injects no nvidia-smi
    assert proc.returncode == 127
    proc = _kubectl(cluster, "exec", "web", "--", "sh")  # an interactive shell is refused, not run
    assert proc.returncode == 126
    assert "kubesim does not simulate interactive shells" in proc.stderr
    assert _kubectl(cluster, "exec", "web", "--", "sh", "-c", "echo hi there", check=True).stdout == "hi there\n"


def test_kubectl_exec_nvidia_smi_shows_the_pods_gpus_and_memory(cluster):
    pod = _engine_pod(cluster)
    out = _kubectl(cluster, "exec", pod, "--", "nvidia-smi", check=True).stdout
    # two H100 SXM (81559 MiB each); vLLM holds its default --gpu-memory-utilization 0.92 of each: 75034 MiB
    assert out.count("NVIDIA H100 80GB HBM3") == 2
    assert out.count("75034MiB /  81559MiB") == 2
    csv = _kubectl(cluster, "exec", pod, "--", "nvidia-smi", "--query-gpu=index,memory.used,memory.total",
                   "--format=csv,noheader,nounits", check=True).stdout
    assert csv.splitlines() == ["0, 75034, 81559", "1, 75034, 81559"]
    ps = _kubectl(cluster, "exec", pod, "--", "ps", "-ef", check=True).stdout.splitlines()
    assert ps[1].split()[1] == "1"
    assert ps[1].endswith(f"python3 -m vllm.entrypoints.openai.api_server {LLAMA} --max-model-len 8192")


def test_official_client_exec(cluster):
    core = cluster.core
    out = stream(core.connect_get_namespaced_pod_exec, _engine_pod(cluster), NS,
                 command=["nvidia-smi", "-L"], stderr=True, stdin=False, stdout=True, tty=False)
    assert [line.split(" (UUID")[0] for line in out.splitlines()] == ["GPU 0: NVIDIA H100 80GB HBM3",
                                                                        "GPU 1: NVIDIA H100 80GB HBM3"]
    resp = stream(core.connect_get_namespaced_pod_exec, "web", NS, command=["ls", "/missing"], stderr=True,
                  stdin=False, stdout=True, tty=False, _preload_content=False)
    resp.run_forever(timeout=10)
    assert resp.returncode == 2
    assert "ls: cannot access '/missing': No such file or directory" in resp.read_stderr()


def test_kubectl_port_forward_a_service_streams_completions(cluster):
    proc = subprocess.Popen(["kubectl", "--server", cluster.url, "-n", NS, "port-forward", "svc/llama", ":8000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        match = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> 8000", line)
        assert match, line
        base = f"http://127.0.0.1:{match.group(1)}"
        body = json.dumps({"model": LLAMA, "prompt": "Hello", "max_tokens": 4, "stream": True}).encode()
        request = urllib.request.Request(base + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            for raw in response:
                if raw.startswith(b"data: "):
                    events.append(raw[6:].strip())
        assert events[-1] == b"[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert sum(1 for c in chunks if c["choices"][0]["text"]) == 4
        with urllib.request.urlopen(base + "/v1/models", timeout=30) as response:  # a second connection
            assert json.loads(response.read())["data"][0]["id"] == LLAMA
    finally:
        proc.terminate()
        proc.wait(10)


def test_official_client_port_forward(cluster):
    pf = portforward(cluster.core.connect_get_namespaced_pod_portforward, _engine_pod(cluster), NS, ports="8000")
    sock = pf.socket(8000)
    sock.settimeout(30)
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: engine\r\nConnection: close\r\n\r\n")
    data = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["data"][0]["id"] == LLAMA
    assert pf.error(8000) is None


def test_spdy_clients_get_a_clear_error(cluster):
    host, port = cluster.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(f"POST /api/v1/namespaces/{NS}/pods/web/exec?command=ls&stdout=true HTTP/1.1\r\n"
                     f"Host: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                     "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n".encode())
        answer = conn.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 400")
    status = json.loads(answer.split("\r\n\r\n", 1)[1])
    assert status["reason"] == "BadRequest"
    assert status["message"].startswith("kubesim streams exec and port-forward over WebSocket only")


def test_exec_in_a_missing_pod_is_404(cluster):
    with pytest.raises(client.exceptions.ApiException) as caught:
        stream(cluster.core.connect_get_namespaced_pod_exec, "ghost", NS, command=["ls"], stderr=True,
               stdin=False, stdout=True, tty=False)
    # the websocket client reports the refused handshake in its reason
    assert "404 Not Found" in caught.value.reason
