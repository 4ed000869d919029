"""List paging: limit/continue with the official client and kubectl --chunk-size, consistent pages, 410 Expired."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kubesim.conftest import api_client_for


def _configmaps(core: client.CoreV1Api, namespace: str, names: list[str]) -> None:
    for name in names:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}, "data": {"k": name}})


def test_limit_and_continue_walk_the_list_in_order(core, namespace):
    _configmaps(core, namespace, ["e", "a", "d", "b", "c"])
    first = core.list_namespaced_config_map(namespace, limit=2)
    assert [cm.metadata.name for cm in first.items] == ["a", "b"]
    assert first.metadata._continue
    assert first.metadata.remaining_item_count == 3
    second = core.list_namespaced_config_map(namespace, limit=2, _continue=first.metadata._continue)
    assert [cm.metadata.name for cm in second.items] == ["c", "d"]
    assert second.metadata.resource_version == first.metadata.resource_version
    third = core.list_namespaced_config_map(namespace, limit=2, _continue=second.metadata._continue)
    assert [cm.metadata.name for cm in third.items] == ["e"]
    assert third.metadata._continue is None
    assert third.metadata.remaining_item_count is None


def test_later_pages_come_from_the_first_pages_snapshot(core, namespace):
    _configmaps(core, namespace, ["a", "b", "c", "d"])
    first = core.list_namespaced_config_map(namespace, limit=2)
    core.delete_namespaced_config_map("d", namespace)
    core.patch_namespaced_config_map("c", namespace, {"data": {"k": "changed"}})
    _configmaps(core, namespace, ["cc"])
    rest = core.list_namespaced_config_map(namespace, limit=10, _continue=first.metadata._continue)
    # as at the first page: d still there, c unchanged, cc not yet created
    assert [(cm.metadata.name, cm.data["k"]) for cm in rest.items] == [("c", "c"), ("d", "d")]
    fresh = core.list_namespaced_config_map(namespace)
    assert [cm.metadata.name for cm in fresh.items] == ["a", "b", "c", "cc"]


def test_selector_pages_have_no_remaining_count(core, namespace):
    for name, team in [("a", "x"), ("b", "y"), ("c", "x"), ("d", "x")]:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "labels": {"team": team}}})
    first = core.list_namespaced_config_map(namespace, label_selector="team=x", limit=2)
    assert [cm.metadata.name for cm in first.items] == ["a", "c"]
    assert first.metadata.remaining_item_count is None
    rest = core.list_namespaced_config_map(namespace, label_selector="team=x", limit=2,
                                           _continue=first.metadata._continue)
    assert [cm.metadata.name for cm in rest.items] == ["d"]


def test_continue_token_older_than_history_is_410_expired(kubesim_factory):
    server = kubesim_factory(history_size=20)
    with api_client_for(server) as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "paging"}})
        _configmaps(core, "paging", [f"cm-{i}" for i in range(4)])
        first = core.list_namespaced_config_map("paging", limit=2)
        _configmaps(core, "paging", [f"more-{i}" for i in range(25)])  # pushes the first page's rv out of history
        with pytest.raises(ApiException) as caught:
            core.list_namespaced_config_map("paging", limit=2, _continue=first.metadata._continue)
        assert caught.value.status == 410
        status = json.loads(caught.value.body)
        assert status["reason"] == "Expired"
        assert status["message"].startswith("The provided continue parameter is too old to display a consistent "
                                             "list result.")
        # the token in the Status continues from the current state after cm-1, new objects included
        rest = core.list_namespaced_config_map("paging", _continue=status["metadata"]["continue"])
        assert [cm.metadata.name for cm in rest.items] == ["cm-2", "cm-3", *sorted(f"more-{i}" for i in range(25))]


def test_garbage_continue_token_is_400(core, namespace):
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_config_map(namespace, _continue="not-a-token")
    assert caught.value.status == 400
    assert "continue key is not valid" in json.loads(caught.value.body)["message"]


def test_kubectl_chunk_size_gets_every_page(core, namespace, kubectl):
    names = [f"cm-{i:02d}" for i in range(7)]
    _configmaps(core, namespace, names)
    out = kubectl("get", "configmaps", "-n", namespace, "--chunk-size=2", "-o", "name").stdout.split()
    assert out == [f"configmap/{n}" for n in names]
    table = kubectl("get", "configmaps", "-n", namespace, "--chunk-size=3", "--no-headers").stdout.splitlines()
    assert [line.split()[0] for line in table] == names
    listed = json.loads(kubectl("get", "configmaps", "-n", namespace, "--chunk-size=2", "-o", "json").stdout)
    assert [item["metadata"]["name"] for item in listed["items"]] == names
