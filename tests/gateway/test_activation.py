"""Activation from zero through the gateway: a request for a service the autoscaler wakes is held in the door's
queue (the waiting room's cap and time-to-live) and published in Redis; the telemetry cycle's activation check counts it with
what routers hold, the autoscaler's decision says the gateway held it, and the held request goes through
once the snapshot shows a ready engine."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import httpx
import redis

from apps.autoscaling.evaluate import evaluate_service
from apps.autoscaling.models import ActivationSignal, ScalingDecision
from apps.serving.models import Pool
from gateway.activation import HELD_PREFIX, Activator
from gateway.app import Gateway
from gateway.door import Door
from gateway.fairness import LOWEST_BAND
from gateway.limits import RequestLimiter
from gateway.snapshot import SnapshotFile
from tests.factories import ClusterFactory, InferenceServiceFactory
from tests.gateway.fake_engine import start_engine
from workers.activation import check_cluster
from workers.kube import kube_for

REDIS_URL = "redis://127.0.0.1:6379/6"
KEY = "sk-test-activation"
SERVICE_ID = 901  # a service id no other test's Redis keys use


def write(path, ready_engines: int, endpoints: list[dict]) -> None:
    path.write_text(json.dumps({
        "tenants": {}, "keys": {hashlib.sha256(KEY.encode()).hexdigest(): {
            "id": 1, "tenant_id": 1, "expires_at": time.time() + 3600, "services": None, "rpm": None,
            "tpm": None, "concurrency": None, "monthly_token_budget": None}},
        "services": [{"id": SERVICE_ID, "tenant_id": 1, "name": "nap", "served_model": "llama-8b", "adapters": [],
                      "routing_policy": "round_robin", "routed": False, "wakes": True,
                      "ready_engines": ready_engines, "endpoints": endpoints}]}))


def held_in_redis(client: redis.Redis) -> int:
    names = list(client.scan_iter(match=f"{HELD_PREFIX}{SERVICE_ID}:*"))
    return sum(int(v) for v in client.mget(names) if v) if names else 0


async def scenario(tmp_path):
    runner, port = await start_engine()
    snapshot = tmp_path / "snapshot.json"
    write(snapshot, 0, [])
    store = redis.Redis.from_url(REDIS_URL)
    gateway = Gateway(SnapshotFile(str(snapshot)), max_body_bytes=10_000, refresh_seconds=0.05,
                      limiter=RequestLimiter(None), activator=Activator(REDIS_URL, max_held=1, poll_seconds=0.05))
    impatient = Gateway(SnapshotFile(str(snapshot)), max_body_bytes=10_000, refresh_seconds=0.05,
                        limiter=RequestLimiter(None), activator=Activator(REDIS_URL, max_wait=0.3))
    request = {"headers": {"authorization": f"Bearer {KEY}"}, "json": {"model": "nap", "prompt": "hi"}}
    async with (httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw",
                                  timeout=30) as client,
                httpx.AsyncClient(transport=httpx.ASGITransport(app=impatient), base_url="http://gw") as other):
        held = asyncio.ensure_future(client.post("/v1/completions", **request))
        while held_in_redis(store) != 1:
            await asyncio.sleep(0.05)
        full = await client.post("/v1/completions", **request)  # the queue of 1 is taken
        timed_out = await other.post("/v1/completions", **request)
        write(snapshot, 1, [{"pod": "nap-0", "address": f"127.0.0.1:{port}"}])
        answer = await held
    left = held_in_redis(store)
    await gateway.upstreams.close()
    await runner.cleanup()
    return answer, full, timed_out, left


def test_a_held_request_goes_through_once_an_engine_is_ready(tmp_path):
    answer, full, timed_out, left = asyncio.run(scenario(tmp_path))
    assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 3
    # The waiting room is the door's queue: past its cap queue_full, past its time-to-live (0.3 s) queue_timeout.
    for refused, code in ((full, "queue_full"), (timed_out, "queue_timeout")):
        assert refused.status_code == 429 and refused.json()["error"]["code"] == code
        assert "retry-after" in refused.headers
    assert left == 0  # nothing held any more, nothing published


def test_the_activation_check_counts_the_gateways_held_requests(make_cluster, tenant_a, settings):
    settings.GATEWAY_REDIS_URL = REDIS_URL
    cluster = ClusterFactory(name="sim", api_url=make_cluster(nodes="l4-24gb:1x1").server.url,
                             insecure_simulator=True)
    service = InferenceServiceFactory(
        tenant=tenant_a, cluster=cluster, deployment_mode="serverless",
        autoscaling={"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 4}},
        pools=[{"role": "engine", "replicas": 0, "min_replicas": 0, "max_replicas": 2}])
    store = redis.Redis.from_url(REDIS_URL)
    names = [f"{HELD_PREFIX}{service.pk}:replica-a", f"{HELD_PREFIX}{service.pk}:replica-b"]
    store.set(names[0], 2, ex=30)
    store.set(names[1], 1, ex=30)
    try:
        assert check_cluster(cluster, kube_for(cluster).core, 3.0) == {service.pk: 3}
    finally:
        store.delete(*names)
    signal = ActivationSignal.objects.get(service=service)
    assert (signal.pending, signal.at_gateway) == (3, 3)
    [outcome] = evaluate_service(service.pk)
    assert (outcome.action, outcome.desired) == ("scaled", 1)
    decision = ScalingDecision.objects.get(service=service, rule="activation")
    assert "held at the gateway: 3" in decision.reason and decision.signals["activation_at_gateway"] == 3
    assert Pool.objects.get(service=service).replicas == 1


def test_which_requests_are_held():
    service = {"wakes": True, "ready_engines": 0, "endpoints": [{"pod": "nap-router", "address": "127.0.0.9:8000"}]}
    alone, signalling = Activator(None), Activator(REDIS_URL)
    assert signalling.should_hold(service)
    # Without Redis this replica cannot wake the service: its router takes the request (and may hold it).
    assert not alone.should_hold(service) and alone.should_hold({**service, "endpoints": []})
    assert not signalling.should_hold({**service, "ready_engines": 1})
    assert not signalling.should_hold({**service, "wakes": False})


def test_a_client_that_leaves_the_waiting_room_leaves_the_queue_and_its_wait_is_metered():
    door, activator = Door(), Activator(None, poll_seconds=0.01)
    asleep = {"id": SERVICE_ID, "wakes": True, "ready_engines": 0, "endpoints": [], "max_outstanding": None}
    awake = {**asleep, "ready_engines": 1, "endpoints": [{"pod": "nap-0", "address": "127.0.0.1:9"}],
             "max_outstanding": 4}
    snapshot = {SERVICE_ID: asleep}

    async def run():
        meters = [{}, {}]
        held = [asyncio.ensure_future(activator.hold(
            SERVICE_ID, door.enter(asleep, band, "1", None, meter, wake_ttl=30),
            lambda: door.tick(snapshot.get))) for band, meter in zip((0, LOWEST_BAND), meters, strict=True)]
        both = {(SERVICE_ID, 0, "1"): 1, (SERVICE_ID, LOWEST_BAND, "1"): 1}
        for _ in range(1000):  # until both have entered the door (each a few turns of the loop after it was held)
            if door.waiting() == both:
                break
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)  # so each has waited at least 0.05 s in the queue
        assert door.waiting() == both
        held[0].cancel()  # its client leaves
        await asyncio.gather(held[0], return_exceptions=True)
        after_leaving = (door.waiting(), activator.held[SERVICE_ID])
        snapshot[SERVICE_ID] = awake  # the next snapshot: an engine is ready, the other one goes on
        answer = await held[1]
        return after_leaving, answer, meters, door.services[SERVICE_ID].outstanding

    after_leaving, answer, meters, outstanding = asyncio.run(run())
    assert after_leaving == ({(SERVICE_ID, LOWEST_BAND, "1"): 1}, 1)
    assert answer is None and outstanding == 1
    assert all(meter["queued_s"] >= 0.05 for meter in meters)  # both waits metered, the one that left too
