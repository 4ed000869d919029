"""Which addresses the telemetry cycle records as a service's upstreams: its ready router pods when it is
routed, else its ready API-serving engine pods (never prefill/decode pools, multi-node workers, pods that
are not ready or have no address)."""

from __future__ import annotations

from apps.serving.names import COMPONENT_LABEL, LWS_WORKER_INDEX_LABEL, ROLE_LABEL, SERVICE_UID_LABEL
from workers.upstreams import upstreams


def pod(name, uid, component, ip="127.5.0.2", ready=True, port=8000, **labels):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": {"name": name, "labels": {SERVICE_UID_LABEL: uid, COMPONENT_LABEL: component, **labels}},
            "spec": {"containers": [{"name": "engine", "ports": [{"name": "http", "containerPort": port}]}]},
            "status": {"phase": "Running", "conditions": conditions, "podIP": ip}}


def test_engines_routers_and_what_is_left_out():
    items = [
        pod("plain-b", "u1", "engine", ip="127.5.0.3"), pod("plain-a", "u1", "engine"),
        pod("plain-c", "u1", "engine", ip="127.5.0.4", ready=False),
        pod("plain-d", "u1", "engine", ip=None),
        pod("split-router", "u2", "router", ip="127.5.0.9", port=8001),
        pod("split-prefill", "u2", "prefill"), pod("split-decode", "u2", "decode"),
        pod("wide-0", "u3", "engine", **{ROLE_LABEL: "leader"}),
        pod("wide-0-1", "u3", "engine", ip="127.5.0.7", **{ROLE_LABEL: "worker", LWS_WORKER_INDEX_LABEL: "1"}),
        pod("stranger", "nobody", "engine"),
    ]
    found = upstreams(items, {"u1": 1, "u2": 2, "u3": 3, "u4": 4})
    assert found[1] == (False, [{"pod": "plain-a", "address": "127.5.0.2:8000"},
                                {"pod": "plain-b", "address": "127.5.0.3:8000"}], 3)  # plain-d: ready, no IP yet
    assert found[2] == (True, [{"pod": "split-router", "address": "127.5.0.9:8001"}], 2)
    assert found[3] == (False, [{"pod": "wide-0", "address": "127.5.0.2:8000"}], 1)
    assert found[4] == (False, [], 0)  # a service with no pod: no upstream, so the gateway answers 503
    # A router that is not ready leaves a routed service without upstreams, never sent around its router.
    items[4] = pod("split-router", "u2", "router", ready=False)
    assert upstreams(items, {"u2": 2})[2] == (True, [], 2)
