"""Fixtures for the scraper and storage tests: a fresh simulated GPU cluster per test (kubesim behind a
real HTTP API server), services reconciled onto it by the real reconciler, and load sent through the
cluster's service proxy."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from apps.serving.choices import Phase
from kubesim.apiserver.server import Server
from tests.factories import ClusterFactory, InferenceServiceFactory, RuntimeFactory
from workers.inventory import sync_inventory
from workers.kube import kube_for
from workers.reconcile import reconcile


@pytest.fixture
def sim(make_cluster):
    """A kubesim cluster with one 8-GPU H100 node and two L4 nodes; engines start fast. Yields its API server."""
    return make_cluster(nodes="h100-sxm-80gb:1x8,l4-24gb:2x1", seed=5).server


@pytest.fixture
def sim_cluster(sim, db):
    """The Cluster row for the simulator."""
    return ClusterFactory(name="sim", api_url=sim.url, insecure_simulator=True)


def reconcile_until_ready(service, timeout: float = 60.0):
    """Run reconcile passes (as the worker would on its requeues) until the service is Ready."""
    deadline = time.monotonic() + timeout
    while True:
        reconcile(service.pk)
        service.refresh_from_db()
        if service.phase == Phase.READY:
            return service
        assert time.monotonic() < deadline, f"service not Ready: {service.phase} {service.conditions}"
        time.sleep(0.3)


@pytest.fixture
def deploy(sim_cluster):
    """deploy(tenant, name, engine="vllm", pools=[...]) → a service Ready on the simulator."""

    def make(tenant, name, engine="vllm", pools=None, **fields):
        runtime = (
            RuntimeFactory(engine="sglang", image="lmsysorg/sglang", tag="v0.5.23", name=f"sglang-{name}")
            if engine == "sglang" else RuntimeFactory(name=f"vllm-{name}")
        )
        pools = pools or [{"role": "engine", "replicas": 2, "gpu_type": "h100-sxm-80gb"}]
        service = InferenceServiceFactory(
            tenant=tenant, name=name, cluster=sim_cluster, runtime=runtime, pools=pools, **fields
        )
        service = reconcile_until_ready(service)
        sync_inventory(sim_cluster, kube_for(sim_cluster))  # GPU nodes, as the beat task keeps them
        return service

    return make


def proxy_base(server: Server, service) -> str:
    """The service's endpoint reached through the simulator's service proxy."""
    host = urllib.parse.urlsplit(service.endpoint)
    name, namespace = host.hostname.split(".")[:2]
    return f"{server.url}/api/v1/namespaces/{namespace}/services/{name}:{host.port}/proxy"


def requests_running(server: Server, service) -> float:
    """`vllm:num_requests_running` of the engine pod the service proxy picks for a `/metrics` request."""
    with urllib.request.urlopen(f"{proxy_base(server, service)}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "vllm:num_requests_running")


def send_load(server: Server, service, requests: int = 24, concurrency: int = 8, max_tokens: int = 16) -> list:
    """Send completions through the service proxy; returns each response's usage."""
    base = proxy_base(server, service)
    model = service.model.name  # read here: the worker threads do not share the test's transaction

    def one(i: int):
        prompt = "You are a careful assistant. " * 20 + f"Question {i}: add {i} and {i}."
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                           "ignore_eos": True}).encode()
        request = urllib.request.Request(f"{base}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["usage"]

    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(one, range(requests)))
