"""Watch: replay from a resourceVersion, ordering, selectors, bookmarks, initial events, timeouts, 410."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.request

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from tests.kubesim.conftest import api_client_for


def events(core, namespace, **kw) -> list[tuple[str, str]]:
    w = watch.Watch()
    return [(ev["type"], ev["object"].metadata.name)
            for ev in w.stream(core.list_namespaced_config_map, namespace, timeout_seconds=1, **kw)]


def raw_watch(url: str, path: str) -> list[dict]:
    with urllib.request.urlopen(url + path, timeout=10) as resp:
        assert resp.headers["Content-Type"] == "application/json"
        return [json.loads(line) for line in resp.read().splitlines() if line.strip()]


def test_watch_replays_every_change_after_a_resource_version_in_order(core, namespace):
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    core.patch_namespaced_config_map("a", namespace, {"data": {"k": "v"}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "b"}})
    core.delete_namespaced_config_map("a", namespace)
    assert events(core, namespace, resource_version=start) == [
        ("ADDED", "a"), ("MODIFIED", "a"), ("ADDED", "b"), ("DELETED", "a")]


def test_watch_without_resource_version_starts_with_current_objects(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "b"}})
    assert events(core, namespace) == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_delivers_live_changes_with_increasing_resource_versions(core, namespace):
    start = core.list_namespaced_config_map(namespace).metadata.resource_version

    def writer():
        time.sleep(0.2)
        for i in range(5):
            core.create_namespaced_config_map(namespace, {"metadata": {"name": f"c{i}"}})

    t = threading.Thread(target=writer)
    t.start()
    seen = []
    for ev in watch.Watch().stream(core.list_namespaced_config_map, namespace, resource_version=start,
                                   timeout_seconds=2):
        seen.append((ev["type"], ev["object"].metadata.name, int(ev["object"].metadata.resource_version)))
    t.join()
    assert [s[:2] for s in seen] == [("ADDED", f"c{i}") for i in range(5)]
    rvs = [s[2] for s in seen]
    assert rvs == sorted(rvs) and len(set(rvs)) == 5


def test_label_selected_watch_sees_objects_leave_and_enter_the_selection(core, namespace):
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "a", "labels": {"tier": "fe"}}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "b", "labels": {"tier": "db"}}})
    core.patch_namespaced_config_map("a", namespace, {"metadata": {"labels": {"tier": "be"}}})
    core.patch_namespaced_config_map("b", namespace, {"metadata": {"labels": {"tier": "fe"}}})
    assert events(core, namespace, resource_version=start, label_selector="tier in (fe)") == [
        ("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b")]
    assert events(core, namespace, resource_version=start, field_selector="metadata.name=b") == [
        ("ADDED", "b"), ("MODIFIED", "b")]


def test_bookmarks_carry_only_the_resource_version(kubesim, core, namespace):
    lines = raw_watch(kubesim.url, f"/api/v1/namespaces/{namespace}/configmaps?watch=true"
                                   "&allowWatchBookmarks=true&timeoutSeconds=1")
    bookmarks = [e for e in lines if e["type"] == "BOOKMARK"]
    assert bookmarks, "expected at least one bookmark within a second (interval 0.2 s)"
    obj = bookmarks[0]["object"]
    assert set(obj) == {"kind", "apiVersion", "metadata"}
    assert (obj["kind"], obj["apiVersion"]) == ("ConfigMap", "v1")
    assert int(obj["metadata"]["resourceVersion"]) > 0


def test_send_initial_events_ends_with_an_annotated_bookmark(kubesim, core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    lines = raw_watch(kubesim.url, f"/api/v1/namespaces/{namespace}/configmaps?watch=1&sendInitialEvents=true"
                                   "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1")
    assert lines[0]["type"] == "ADDED" and lines[0]["object"]["metadata"]["name"] == "a"
    assert lines[1]["type"] == "BOOKMARK"
    assert lines[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_timeout_seconds_ends_the_stream(kubesim, namespace):
    started = time.monotonic()
    raw_watch(kubesim.url, f"/api/v1/namespaces/{namespace}/configmaps?watch=true&timeoutSeconds=1")
    assert time.monotonic() - started < 10  # it ended on its own rather than hanging until the client timeout


def test_history_no_longer_kept_is_expired(kubesim_factory):
    server = kubesim_factory(history_size=5)
    core = client.CoreV1Api(api_client_for(server))
    start = core.list_namespaced_config_map("default").metadata.resource_version
    for i in range(10):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"c{i}"}})
    lines = raw_watch(server.url, f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={start}")
    assert len(lines) == 1
    assert lines[0]["type"] == "ERROR"
    status = lines[0]["object"]
    assert (status["code"], status["reason"]) == (410, "Expired")
    assert status["message"].startswith(f"too old resource version: {start} (")
    with pytest.raises(ApiException) as e:
        list(watch.Watch().stream(core.list_namespaced_config_map, "default", resource_version=start,
                                  timeout_seconds=1))
    assert e.value.status == 410


def test_kubectl_get_watch_prints_new_objects(kubesim, core, namespace, tmp_path):
    proc = subprocess.Popen(["kubectl", "--server", kubesim.url, "--cache-dir", str(tmp_path / "cache"), "-n",
                             namespace, "get", "configmaps", "-w", "-o", "name"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "watched"}})
        line = proc.stdout.readline()
        assert line.strip() == "configmap/watched"
    finally:
        proc.kill()
        proc.wait()


def test_the_legacy_watch_path_follows_one_object(kubesim, core, namespace):
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "a"}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "b"}})
    lines = raw_watch(kubesim.url, f"/api/v1/watch/namespaces/{namespace}/configmaps/b?resourceVersion={start}"
                                   "&timeoutSeconds=1")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [("ADDED", "b")]
