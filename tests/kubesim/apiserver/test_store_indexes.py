"""Lists served from the store's namespace, label and field indexes stay exact as objects change."""

from __future__ import annotations

from kubesim.apiserver.store import Store


def pod(name: str, labels: dict, node: str | None = None) -> dict:
    spec = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def names(store: Store, namespace=None, labels=None, fields=None) -> list[str]:
    items, _rv = store.list("v1/pods", namespace, labels, fields)
    return [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items]


def test_label_and_namespace_lists_follow_relabels_and_deletions():
    store = Store(seed=1)
    store.create("v1/namespaces", None, {"metadata": {"name": "other"}})
    store.create("v1/pods", "default", pod("a", {"app": "web", "tier": "1"}))
    store.create("v1/pods", "default", pod("b", {"app": "db"}))
    store.create("v1/pods", "other", pod("c", {"app": "web"}))
    assert names(store, labels="app=web") == ["default/a", "other/c"]
    assert names(store, "default", "app==web") == ["default/a"]
    assert names(store, "other") == ["other/c"]
    assert names(store, labels="app in (db)") == ["default/b"]
    assert names(store, labels="app in (db,web),tier=1") == ["default/a"]
    assert names(store, labels="app!=web") == ["default/b"]

    store.patch("v1/pods", "default", "a", {"metadata": {"labels": {"app": "db"}}}, "merge")
    assert names(store, labels="app=web") == ["other/c"]
    assert names(store, labels="app=db") == ["default/a", "default/b"]

    store.delete("v1/pods", "default", "b")
    assert names(store, labels="app=db") == ["default/a"]
    assert names(store, "default") == ["default/a"]


def test_field_lists_find_bound_and_unbound_pods():
    store = Store(seed=1)
    store.create("v1/pods", "default", pod("bound", {}, node="node-1"))
    store.create("v1/pods", "default", pod("waiting", {}))
    assert names(store, fields="spec.nodeName=node-1") == ["default/bound"]
    assert names(store, fields="spec.nodeName=") == ["default/waiting"]
    assert names(store, fields="spec.nodeName!=node-1") == ["default/waiting"]


def test_indexes_are_rebuilt_from_a_snapshot():
    store = Store(seed=1)
    store.create("v1/pods", "default", pod("a", {"app": "web"}, node="node-1"))
    restored = Store(seed=2, seed_objects=False)
    restored.restore(store.snapshot())
    assert names(restored, "default", "app=web", "spec.nodeName=node-1") == ["default/a"]
