"""The door's queue against a gateway process: a service saturated at one request (max_num_seqs 1 on one ready
engine, through the real snapshot), a full band answered 429 queue_full, a wait past the band's time-to-live
answered 429 queue_timeout with retry-after, a higher band served before a lower one that came first, a
client that disconnects while queued leaving the queue, a bad x-priority refused, and every outcome metered."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from apps.gateway.models import UsageRow
from apps.serving.models import InferenceService
from gateway.door import Door
from tests.database import database_url_of_test_db
from tests.gateway import fake_engine
from tests.gateway.test_no_usage_lost import serve_chat_from, start
from tests.polling import wait_for


def waiting(base: str) -> dict[str, float]:
    """gateway_queue_waiting by band."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gateway_queue_waiting":
                found[sample.labels["band"]] = found.get(sample.labels["band"], 0) + sample.value
    return found


def send(port: int, key: str, prompt: str, *, priority: str | None = None, stream: bool = False):
    """An open connection with the request sent and nothing read yet."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    if priority is not None:
        headers["x-priority"] = priority
    body = {"model": "chat", "prompt": prompt, "max_tokens": 3, "stream": stream, **({"delay_s": 2} if stream else {})}
    conn.request("POST", "/v1/completions", json.dumps(body), headers)
    return conn


def answer(conn) -> tuple[int, dict, dict]:
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), json.loads(response.read())


def hang_up(conn) -> None:
    """The client goes away: its socket shut down now (a response object still holds a reference to it)."""
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.sock.close()


def in_thread(fn, *args):
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    thread.start()
    return thread, out


def test_the_queue_sheds_orders_and_lets_a_client_leave(transactional_db, world, tenant_a):
    InferenceService.objects.filter(tenant=tenant_a, name="chat").update(engine_settings={"max_num_seqs": 1})
    fake_engine.SEEN.clear()
    with fake_engine.engine_in_thread() as engine_port:
        serve_chat_from(world, tenant_a, engine_port)
        proc, port, base = start(world, "--database-url", database_url_of_test_db(), "--usage-flush-seconds", "0.2",
                                 "--queue-cap", "1", "--queue-ttl", "3", "--queue-ttl-lowest", "60")
        try:
            # A slow stream takes the service's one place.
            holder = send(port, world["all"], "holder", stream=True)
            first = holder.getresponse()
            assert first.status == 200 and first.readline()
            # A request may not raise its band, and is told which header is wrong; nothing waits for it.
            raised = send(port, world["all"], "raised", priority="1")
            status, _, body = answer(raised)
            assert status == 400 and body["error"]["param"] == "x-priority"
            # The lowest band waits first; then one of band 0; a second of band 0 finds its band full.
            low_thread, low = in_thread(lambda: answer(send(port, world["all"], "low", priority="batch")))
            wait_for(lambda: waiting(base).get("-20") == 1, message="the batch request queued")
            timed_thread, timed = in_thread(lambda: answer(send(port, world["all"], "timed")))
            wait_for(lambda: waiting(base).get("0") == 1, message="a band-0 request queued")
            status, headers, body = answer(send(port, world["all"], "full"))
            assert status == 429 and body["error"]["code"] == "queue_full"
            # The band-0 request waits out its time-to-live (3 s) while the holder still streams.
            timed_thread.join(timeout=30)
            status, headers, body = timed[0]
            assert status == 429 and body["error"]["code"] == "queue_timeout" and int(headers["retry-after"]) >= 1
            # A client that leaves while queued is out of the queue at once.
            leaving = send(port, world["chat_only"], "leaving")
            wait_for(lambda: waiting(base).get("0") == 1, message="the leaving request queued")
            hang_up(leaving)
            wait_for(lambda: not waiting(base).get("0"), message="the queue without the client that left")
            # Band 0 goes before the batch request that came first, once the holder's place is free.
            urgent_thread, urgent = in_thread(lambda: answer(send(port, world["all"], "urgent")))
            wait_for(lambda: waiting(base).get("0") == 1, message="the urgent request queued")
            hang_up(holder)  # the client leaves: the stream ends, its place goes to the next in line
            urgent_thread.join(timeout=30)
            low_thread.join(timeout=30)
            assert urgent[0][0] == 200 and low[0][0] == 200
            served = [seen["prompt"] for seen in fake_engine.SEEN]
            assert served == ["holder", "urgent", "low"]
            wait_for(lambda: UsageRow.objects.count() >= 7, message="seven usage rows")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    rows = {(row.status, row.shed or "", row.queued_ms is not None) for row in UsageRow.objects.all()}
    # One row per request (holder, raised, low, timed, full, leaving, urgent): the queue's outcomes each metered.
    assert UsageRow.objects.count() == 7
    assert (429, "queue_full", False) in rows
    assert (429, "queue_timeout", True) in rows
    assert (499, "", True) in rows  # the client that left while queued: its wait is metered
    assert sum(1 for row in UsageRow.objects.filter(status=200, queued_ms__isnull=False)) == 2  # urgent, low


def test_a_replica_is_saturated_at_its_share_of_the_bound():
    door = Door(replicas=2)
    service, unbounded = {"id": 1, "max_outstanding": 3}, {"id": 2, "max_outstanding": None}

    async def run():
        seen = [door.saturated(service)]
        for _ in range(2):  # this replica's share: ceil(3 / 2) = 2
            assert await door.enter(service, 0, "t", None, {}) is None
            seen.append(door.saturated(service))
        door.leave(1, 0)
        seen.append(door.saturated(service))
        for _ in range(5):
            assert await door.enter(unbounded, 0, "t", None, {}) is None
        return [*seen, door.saturated(unbounded)]

    assert asyncio.run(run()) == [False, False, True, False, False]
    assert not Door(enabled=False).saturated(service)
