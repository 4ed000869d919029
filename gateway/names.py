"""Which of a tenant's services a request's `model` names. The rule, one place for the gateway's request path,
the batch runner and the answer's headers:

- A service's own name always names that service alone (rule `service`).
- A served model's name or an adapter's name that one of the key's services answers to names it (`model`).
- A served model's or adapter's name that several of them answer to (two services of one model, say a chat and
  a RAG configuration) is balanced between them (`balanced`): each request goes to the one with the fewest
  requests outstanding at this replica per ready engine, a service with no ready engine last, ties to the
  lowest id. Every answer says which service took it and by which rule (`x-gateway-service`,
  `x-gateway-model-rule`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

SERVICE, MODEL, BALANCED = "service", "model", "balanced"
SERVICE_HEADER, RULE_HEADER = b"x-gateway-service", b"x-gateway-model-rule"


def names_of(services: Iterable[dict]) -> dict[str, tuple[dict, ...]]:
    """Every name the services answer to → the services that answer to it: a service name to its service
    alone (it wins over a model or adapter of the same spelling), any other name to all that serve it."""
    services = list(services)
    names: dict[str, tuple[dict, ...]] = {s["name"]: (s,) for s in services}
    for service in services:
        for name in {service["served_model"], *service["adapters"]} - {service["name"]}:
            if name in names and len(names[name]) == 1 and names[name][0]["name"] == name:
                continue  # another service's own name
            names[name] = (*names.get(name, ()), service)
    return names


def choose(candidates: tuple[dict, ...], name: str, outstanding: Callable[[int], int]) -> tuple[dict, str]:
    """(the service that takes a request for `name`, the rule that chose it)."""
    if len(candidates) == 1:
        service = candidates[0]
        return service, SERVICE if service["name"] == name else MODEL

    def load(service: dict) -> tuple:
        engines = service.get("ready_engines") or 0
        return (engines == 0, outstanding(service["id"]) / max(1, engines), service["id"])

    return min(candidates, key=load), BALANCED


def answer_headers(service: dict, rule: str) -> list[tuple[bytes, bytes]]:
    return [(SERVICE_HEADER, service["name"].encode("latin-1", "replace")), (RULE_HEADER, rule.encode())]
