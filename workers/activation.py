"""Activation of serverless services scaled to zero: read how many requests their router holds.

Runs inside each telemetry cycle (so within one scrape period of a request's arrival): for every builtin
serverless service of the cluster whose engine pool is at 0 replicas, the router pod's `/metrics` is read
through the API server's pod proxy, the gauge `router_activation_pending_requests` is stored as an
`ActivationSignal`, and when a request is held the service is evaluated at once on the `autoscale` queue
instead of at the next beat. The autoscaler itself never scrapes.
"""

from __future__ import annotations

import json
import logging

import redis
from django.conf import settings
from django.utils import timezone
from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from apps.autoscaling.models import ActivationSignal
from apps.catalog.choices import DeploymentMode
from apps.clusters.models import Cluster
from apps.serving.models import Pool
from apps.serving.names import COMPONENT_LABEL, MANAGED_SELECTOR, SERVICE_UID_LABEL
from controlplane.celery import app as celery_app
from controlplane.tasknames import AUTOSCALE_EVALUATE_SERVICE
from gateway.activation import HELD_PREFIX
from workers.kubeerrors import classify

log = logging.getLogger(__name__)

PENDING_GAUGE = "router_activation_pending_requests"
ROUTER_SELECTOR = f"{MANAGED_SELECTOR},{COMPONENT_LABEL}=router"


def services_at_zero(cluster: Cluster) -> dict[str, int]:
    """service uid → id of the cluster's builtin serverless services whose engine pool is at 0 replicas."""
    rows = Pool.objects.filter(
        service__cluster=cluster, service__deployment_mode=DeploymentMode.SERVERLESS, replicas=0,
        service__autoscaling__autoscaler="builtin", service__deletion_requested_at__isnull=True,
    ).values_list("service__uid", "service_id")
    return {str(uid): pk for uid, pk in rows}


def pending_in(text: str) -> int:
    """The held-request gauge of a router exposition (0 when the router does not export it)."""
    for family in text_string_to_metric_families(text):
        if family.name == PENDING_GAUGE:
            return int(sum(sample.value for sample in family.samples))
    return 0


def check_cluster(cluster: Cluster, core: k8s.CoreV1Api, timeout: float) -> dict[int, int]:
    """Read the routers of the cluster's services at zero; returns service id → requests held."""
    services = services_at_zero(cluster)
    if not services:
        return {}
    try:
        response = core.list_pod_for_all_namespaces(label_selector=ROUTER_SELECTOR, _preload_content=False,
                                                    _request_timeout=(timeout, timeout * 2))
        pods = json.loads(response.data).get("items") or []
    except Exception as exc:  # an unreachable cluster is the scrape cycle's problem, reported there
        log.warning("activation: listing routers of %s failed: %s", cluster.name, classify(exc).message)
        return {}
    held: dict[int, int] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        service_id = services.get((meta.get("labels") or {}).get(SERVICE_UID_LABEL, ""))
        if service_id is None or (pod.get("status") or {}).get("phase") != "Running":
            continue
        port = next((p["containerPort"] for c in pod["spec"].get("containers", []) for p in c.get("ports", [])
                     if p.get("name") == "http"), None)
        try:
            answer = core.connect_get_namespaced_pod_proxy_with_path(
                f"{meta['name']}:{port}", meta["namespace"], "metrics", _preload_content=False,
                _request_timeout=(timeout, timeout))
            held[service_id] = held.get(service_id, 0) + pending_in(answer.data.decode("utf-8", errors="replace"))
        except Exception as exc:  # one router's failure is logged; the next cycle tries again
            log.info("activation: router %s/%s: %s", meta.get("namespace"), meta.get("name"), classify(exc).message)
    at_gateway = gateway_held(list(services.values()))
    for service_id, count in at_gateway.items():
        held[service_id] = held.get(service_id, 0) + count
    now = timezone.now()
    for service_id, pending in held.items():
        ActivationSignal.objects.update_or_create(service_id=service_id, defaults={
            "pending": pending, "at_gateway": at_gateway.get(service_id, 0), "observed_at": now})
        if pending:
            _evaluate_now(service_id)
    return held


def gateway_held(service_ids: list[int]) -> dict[int, int]:
    """Requests the inference gateways hold for these services (gateway/activation.py), by service."""
    if not settings.GATEWAY_REDIS_URL or not service_ids:
        return {}
    try:
        client = redis.Redis.from_url(settings.GATEWAY_REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        held = {}
        for service_id in service_ids:
            names = list(client.scan_iter(match=f"{HELD_PREFIX}{service_id}:*", count=1000))
            count = sum(int(value) for value in client.mget(names) if value) if names else 0
            if count:
                held[service_id] = count
        return held
    except redis.RedisError as exc:  # the routers' signal still counts; the next cycle tries again
        log.warning("activation: requests held at the gateway not read: %s", exc)
        return {}


def _evaluate_now(service_id: int) -> None:
    try:
        celery_app.send_task(AUTOSCALE_EVALUATE_SERVICE, args=[service_id], retry=False)
    except Exception:  # the broker may be down; the beat evaluation reads the same signal
        log.warning("activation: could not enqueue an evaluation of service %s", service_id)
