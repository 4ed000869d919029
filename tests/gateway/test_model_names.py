"""Model names at the door (gateway/names.py): a service's own name names it alone; a model or adapter name
that one of the key's services answers to names that service; one that several answer to is balanced between
them by outstanding requests per ready engine. The answer says which service took it and by which rule."""

from __future__ import annotations

import json
import urllib.request

from django.utils import timezone

from apps.gateway.models import InferenceKey, Upstream
from apps.gateway.snapshot import write_snapshot
from apps.serving.models import InferenceService
from gateway.names import BALANCED, MODEL, SERVICE, choose, names_of
from tests.factories import InferenceServiceFactory
from tests.gateway import fake_engine
from tests.gateway.test_no_usage_lost import start


def completion(base: str, key: str, model: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"{base}/v1/completions", method="POST",
                                     data=json.dumps({"model": model, "prompt": "hi", "max_tokens": 2}).encode(),
                                     headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, dict(response.headers)


def svc(sid: int, name: str, model: str, adapters=(), engines: int = 1) -> dict:
    return {"id": sid, "name": name, "served_model": model, "adapters": list(adapters), "ready_engines": engines}


def test_a_service_name_names_one_service_and_a_shared_model_name_names_both():
    chat, rag = svc(1, "llama-8b-chat", "llama-8b"), svc(2, "llama-8b-rag", "llama-8b", adapters=["sql-lora"])
    # A third service whose model is spelled like the chat service's own name: the service name wins.
    odd = svc(3, "odd", "llama-8b-chat")
    names = names_of([chat, rag, odd])
    assert names["llama-8b-chat"] == (chat,)
    assert names["llama-8b"] == (chat, rag)
    assert names["sql-lora"] == (rag,)
    assert names["odd"] == (odd,)


def test_the_rule_is_said_and_a_shared_name_goes_to_the_least_loaded_per_engine():
    chat, rag = svc(1, "llama-8b-chat", "llama-8b", engines=2), svc(2, "llama-8b-rag", "llama-8b", engines=1)
    asleep = svc(3, "llama-8b-night", "llama-8b", engines=0)
    assert choose((chat,), "llama-8b-chat", lambda sid: 0) == (chat, SERVICE)
    assert choose((rag,), "llama-8b", lambda sid: 0) == (rag, MODEL)
    # chat holds 3 on 2 engines (1.5 each), rag 1 on 1 (1.0): rag takes it.
    load = {1: 3, 2: 1, 3: 0}.get
    assert choose((chat, rag, asleep), "llama-8b", load) == (rag, BALANCED)
    # chat 2 on 2 (1.0), rag 1 on 1 (1.0): a tie goes to the lowest id; the one with no ready engine comes last
    # though it holds nothing.
    load = {1: 2, 2: 1, 3: 0}.get
    assert choose((asleep, rag, chat), "llama-8b", load) == (chat, BALANCED)


def test_the_answer_names_the_service_and_the_rule(transactional_db, world, tenant_a):
    chat = InferenceService.objects.get(tenant=tenant_a, name="chat")
    rag = InferenceServiceFactory(tenant=tenant_a, name="rag", model=chat.model)
    key = InferenceKey.objects.get(tenant=tenant_a, name="all")
    assert key.services.count() == 0  # every service of the tenant
    with fake_engine.engine_in_thread() as port:
        for service in (chat, rag):
            Upstream.objects.create(service=service, ready_engines=1, seen_at=timezone.now(),
                                    endpoints=[{"pod": f"{service.name}-0", "address": f"127.0.0.1:{port}"}])
        write_snapshot(world["path"])
        proc, _, base = start(world)
        try:
            answers = {}
            for model in ("rag", chat.model.name, "sql-lora"):
                status, headers = completion(base, world["all"], model)
                answers[model] = (status, headers.get("x-gateway-service"), headers.get("x-gateway-model-rule"))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert answers == {
        "rag": (200, "rag", "service"),
        # Nothing outstanding at either: the tie goes to the lower id, chat.
        chat.model.name: (200, "chat", "balanced"),
        "sql-lora": (200, "chat", "model"),  # only chat carries the adapter
    }
