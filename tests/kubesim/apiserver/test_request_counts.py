"""kubesim counts the requests it answers by verb, watches apart (`Server.requests`, GET /kubesim/requests)."""

from __future__ import annotations

import json
import urllib.request

from kubernetes import client, watch

from kubesim.apiserver.server import Server


def test_requests_are_counted_by_verb_and_watches_apart():
    server = Server(port=0)
    server.start_in_thread()
    configuration = client.Configuration()
    configuration.host = server.url
    api = client.ApiClient(configuration)
    core = client.CoreV1Api(api)
    try:
        before = dict(server.requests)
        core.create_namespaced_config_map("default", {"metadata": {"name": "a"}, "data": {"k": "v"}})  # POST
        core.patch_namespaced_config_map("a", "default", {"data": {"k": "w"}})  # PATCH
        core.list_namespaced_config_map("default")  # GET
        core.read_namespaced_config_map("a", "default")  # GET
        for _ in watch.Watch().stream(core.list_namespaced_config_map, "default", timeout_seconds=1):
            pass  # one watch (?watch=true): the ADDED event of "a", then the server ends it
        with urllib.request.urlopen(f"{server.url}/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=1",
                                    timeout=10) as response:
            response.read()  # the legacy watch path counts as a watch too
        core.delete_namespaced_config_map("a", "default")  # DELETE
        after = dict(server.requests)
        sent = {verb: after.get(verb, 0) - before.get(verb, 0) for verb in after}
        assert {verb: n for verb, n in sent.items() if n} == {"POST": 1, "PATCH": 1, "GET": 2, "WATCH": 2, "DELETE": 1}
        with urllib.request.urlopen(f"{server.url}/kubesim/requests", timeout=10) as response:
            served = json.load(response)
        assert served == after  # the endpoint's own request is not counted
    finally:
        api.close()
        server.stop_in_thread()
