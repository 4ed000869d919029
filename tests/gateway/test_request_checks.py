"""In one process, the gateway app at its door: a `model` that is not a name, fields of the wrong type or
disagreeing, nesting past the bound and two Authorization headers are each a 400 naming the field, metered
with no model; every request let through is settled and metered however it ends, a fault of the gateway's own
included; and what the checks let through is what the engine will do, multiplied as it generates."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.gateway.models import UsageRow
from gateway.app import Gateway
from gateway.limits import RequestLimiter
from gateway.metering import UsageWriter
from gateway.prefix import hash_key
from gateway.snapshot import SnapshotFile
from gateway.upstream import Upstreams
from gateway.validation import ENDPOINTS, MAX_DEPTH, Invalid, checked_demand
from tests.database import database_url_of_test_db
from tests.gateway.fake_engine import start_engine

pytestmark = pytest.mark.django_db(transaction=True)
KEY, ONE_AT_A_TIME = "sk-door-any", "sk-door-one"
COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def write_snapshot(path, tenant_id: int, port: int) -> None:
    def key(id_: int, concurrency: int | None) -> dict:
        return {"id": id_, "tenant_id": tenant_id, "expires_at": time.time() + 3600, "services": None, "rpm": None,
                "tpm": None, "concurrency": concurrency, "monthly_token_budget": None}

    path.write_text(json.dumps({
        "tenants": {}, "keys": {hashlib.sha256(KEY.encode()).hexdigest(): key(1, None),
                                hashlib.sha256(ONE_AT_A_TIME.encode()).hexdigest(): key(2, 1)},
        "services": [{"id": 5, "tenant_id": tenant_id, "name": "chat", "served_model": "llama-8b", "adapters": [],
                      "routing_policy": "round_robin", "routed": False,
                      "endpoints": [{"pod": "chat-0", "address": f"127.0.0.1:{port}"}]}]}))


class Broken(Upstreams):
    """Upstreams whose forwarding fails in the gateway itself, after the request was let through."""

    async def forward(self, *args, **kwargs):
        raise RuntimeError("a fault of the gateway's own")


def run(tmp_path, tenant, requests: list[tuple], upstreams: Upstreams | None = None) -> tuple[list, list]:
    """Send `requests` ((path, key, body bytes, extra headers)) in turn to a gateway app metering into the test
    database; (the answers, the usage rows written, oldest first)."""

    async def scenario():
        runner, port = await start_engine()
        snapshot = tmp_path / "snapshot.json"
        write_snapshot(snapshot, tenant.pk, port)
        writer = UsageWriter(database_url_of_test_db(), prefix_key=hash_key())
        gateway = Gateway(SnapshotFile(str(snapshot)), max_body_bytes=1_000_000, refresh_seconds=60,
                          limiter=RequestLimiter(None), usage=writer, upstreams=upstreams)
        answers = []
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw") as client:
                for path, key, body, extra in requests:
                    headers = [("authorization", f"Bearer {key}"), ("content-type", "application/json"), *extra]
                    answers.append(await client.post(path, content=body, headers=headers))
        finally:
            await gateway.upstreams.close()
            await runner.cleanup()
        assert writer.flush()
        return answers

    answers = asyncio.run(scenario())
    return answers, list(UsageRow.objects.order_by("id").values_list("model", "status"))


def completion(**fields) -> bytes:
    return json.dumps({"model": "chat", "prompt": "hi", "max_tokens": 3, **fields}).encode()


def error_of(answer: httpx.Response) -> tuple[int, str | None]:
    return answer.status_code, answer.json()["error"]["param"]


def test_a_model_that_is_not_a_name_is_400_before_anything_else_and_metered_without_it(tmp_path, tenant_a):
    bad = ["chat\x00", "\ud800", "ch\nat", "Chat", "-chat", "c" * 64, 5, None, ["chat"]]
    bodies = [json.dumps({"model": model, "prompt": "hi"}).encode() for model in bad]
    answers, rows = run(tmp_path, tenant_a, [(COMPLETIONS, KEY, body, ()) for body in bodies]
                        + [(COMPLETIONS, KEY, completion(model="c" * 63), ())])
    assert [error_of(a) for a in answers[:-1]] == [(400, "model")] * len(bad)
    assert "lower-case letters, digits and '-'" in answers[0].json()["error"]["message"]
    # A valid name that names nothing is still the 404 it was, and metered with its name.
    assert answers[-1].status_code == 404 and answers[-1].json()["error"]["code"] == "model_not_found"
    assert rows == [("", 400)] * len(bad) + [("c" * 63, 404)]


def test_fields_the_gateway_reads_must_have_the_engines_types_and_agree(tmp_path, tenant_a):
    cases = [
        (COMPLETIONS, completion(stream="yes"), "stream"),
        (COMPLETIONS, completion(stream=True, stream_options="x"), "stream_options"),
        (COMPLETIONS, completion(stream=True, stream_options=["include_usage"]), "stream_options"),
        (COMPLETIONS, completion(stream=True, stream_options={"include_usage": "yes"}), "stream_options"),
        # The engine of /v1/completions reads max_tokens only: a second length it would ignore is refused.
        (COMPLETIONS, completion(max_completion_tokens=1, max_tokens=400), "max_completion_tokens"),
        (CHAT, json.dumps({"model": "chat", "messages": [], "max_completion_tokens": 1, "max_tokens": 400}).encode(),
         "max_completion_tokens"),
        (CHAT, json.dumps({"model": "chat", "messages": "hi"}).encode(), "messages"),
        (COMPLETIONS, completion(n=3, best_of=2), "best_of"),
        (COMPLETIONS, completion(n=0), "n"),
        (COMPLETIONS, completion(n=129), "n"),
        (COMPLETIONS, completion(max_tokens=-1), "max_tokens"),
        (COMPLETIONS, completion(max_tokens=1.5), "max_tokens"),
        (COMPLETIONS, completion(max_tokens=True), "max_tokens"),
        (COMPLETIONS, completion(max_tokens=10**30), "max_tokens"),
        (COMPLETIONS, completion(prompt=["a", [1]]), "prompt"),
        (COMPLETIONS, completion(prompt=[]), "prompt"),
        (COMPLETIONS, completion(prompt=["a"] * 257), "prompt"),
        (COMPLETIONS, completion(prompt={"text": "hi"}), "prompt"),
    ]
    answers, rows = run(tmp_path, tenant_a, [(path, KEY, body, ()) for path, body, _ in cases])
    assert [error_of(a) for a in answers] == [(400, param) for _, _, param in cases]
    assert rows == [("chat", 400)] * len(cases)


def test_nesting_past_the_bound_is_400_at_any_depth(tmp_path, tenant_a):
    deep = [json.dumps({"model": "chat", "prompt": "hi", "x": json.loads(nested(MAX_DEPTH - 1))}).encode(),
            json.dumps({"model": "chat", "prompt": "hi", "x": json.loads(nested(MAX_DEPTH))}).encode(),
            b'{"model": "chat", "prompt": ' + nested(600).encode() + b"}",
            nested(10_000).encode(), b"[" * 100_000]
    answers, rows = run(tmp_path, tenant_a, [(COMPLETIONS, KEY, body, ()) for body in deep])
    assert [a.status_code for a in answers] == [200, 400, 400, 400, 400]
    assert all("nested too deeply" in a.json()["error"]["message"] for a in answers[1:4])
    assert rows == [("chat", 200), ("", 400), ("", 400), ("", 400), ("", 400)]


def test_two_authorization_headers_are_400_whichever_comes_first(tmp_path, tenant_a):
    twice = (("authorization", "Bearer sk-not-a-key"),)
    answers, rows = run(tmp_path, tenant_a, [(COMPLETIONS, KEY, completion(), twice),
                                             (CHAT, KEY, completion(), twice)])
    assert [(a.status_code, a.json()["error"]["code"]) for a in answers] == [(400, "duplicate_header")] * 2
    assert rows == []  # no key was chosen: nothing to meter against


def test_a_bad_stream_request_gives_its_slot_back_at_once(tmp_path, tenant_a):
    # A key allowed one request in flight: the refused request held no slot, so the next one goes through.
    answers, rows = run(tmp_path, tenant_a, [
        (COMPLETIONS, ONE_AT_A_TIME, completion(stream=True, stream_options="x"), ()),
        (COMPLETIONS, ONE_AT_A_TIME, completion(stream=True, stream_options=[1]), ()),
        (COMPLETIONS, ONE_AT_A_TIME, completion(stream=True, stream_options={"include_usage": True}), ())])
    assert [a.status_code for a in answers] == [400, 400, 200]
    assert rows == [("chat", 400), ("chat", 400), ("chat", 200)]


def test_a_fault_after_admission_is_a_500_that_settles_and_is_metered(tmp_path, tenant_a):
    answers, rows = run(tmp_path, tenant_a, [(COMPLETIONS, ONE_AT_A_TIME, completion(), ())] * 3, Broken())
    # Without the settle the key's one slot would stay taken for the lease (600 s): the second would be 429.
    assert [error_of(a) for a in answers] == [(500, None)] * 3
    assert answers[0].json()["error"]["code"] == "internal_error" and answers[0].json()["error"]["type"] == "server_error"
    assert rows == [("chat", 500)] * 3


def test_the_issues_disagreeing_lengths_are_named():
    with pytest.raises(Invalid) as caught:
        checked_demand({"prompt": "x", "max_tokens": 400, "max_completion_tokens": 1}, ENDPOINTS[COMPLETIONS])
    assert caught.value.param == "max_completion_tokens" and "set 'max_tokens'" in caught.value.message
    with pytest.raises(Invalid) as caught:
        checked_demand({"messages": [], "max_tokens": 400, "max_completion_tokens": 1}, ENDPOINTS[CHAT])
    assert "'max_completion_tokens' and 'max_tokens' disagree" in caught.value.message


SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-3, 300) | st.floats() | st.text(max_size=8)
           | st.sampled_from(["chat", "nope", "\ud800", "a\x00", "C" * 70]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                                           max_size=4), max_leaves=12)
NAMES = st.sampled_from(["chat", "nope"])
BODIES = st.fixed_dictionaries(
    {"model": NAMES | VALUES, "prompt": st.text(max_size=8) | VALUES, "messages": st.just([]) | VALUES},
    optional={name: st.integers(1, 3) | VALUES for name in (
        "stream", "stream_options", "max_tokens", "max_completion_tokens", "n", "best_of", "user")}) | VALUES


def test_no_body_makes_the_gateway_fail(tmp_path):
    loop = asyncio.new_event_loop()
    runner, port = loop.run_until_complete(start_engine())
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, 1, port)
    gateway = Gateway(SnapshotFile(str(snapshot)), max_body_bytes=1_000_000, refresh_seconds=60,
                      limiter=RequestLimiter(None))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=gateway), base_url="http://gw")
    seen = set()

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(body=BODIES, path=st.sampled_from([COMPLETIONS, CHAT]))
    def answer(body, path):
        # allow_nan: NaN and Infinity are sent as JavaScript writes them, for the door to refuse.
        sent = json.dumps(body, allow_nan=True).encode()
        status = loop.run_until_complete(client.post(path, content=sent, headers={
            "authorization": f"Bearer {ONE_AT_A_TIME}"})).status_code
        seen.add(status)
        assert status < 500

    try:
        answer()
    finally:
        loop.run_until_complete(client.aclose())
        loop.run_until_complete(gateway.upstreams.close())
        loop.run_until_complete(runner.cleanup())
        loop.close()
    # The examples reached the lookup and the engine (the fake one serves completions only), not only the checks;
    # and the key's one slot was given back each time (no 429).
    assert {200, 400, 404} <= seen and 429 not in seen
