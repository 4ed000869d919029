"""Revisions: a save that changes what the pods run makes one, others do not; rollback restores the pod
templates exactly; the API lists, diffs and rolls back, scoped by tenant."""

from __future__ import annotations

import pytest

from apps.core.models import AuditEntry
from apps.serving.actions import save_service
from apps.serving.models import InferenceService, Revision
from apps.serving.rendering import render_service
from apps.serving.rendering.spec import PoolSpec, spec_from_service
from tests.factories import AdapterFactory, ClusterFactory, ModelFactory, RuntimeFactory


@pytest.fixture
def service(tenant_a, owner_a):
    model = ModelFactory(name="llama-8b")
    new = InferenceService(tenant=tenant_a, name="chat", cluster=ClusterFactory(name="sim"), model=model,
                           runtime=RuntimeFactory(name="vllm-old", tag="v0.33.0"))
    return save_service(new, pools=[PoolSpec("engine", max_replicas=4)], adapters=[], actor=owner_a, via="api")


def url(service, suffix=""):
    return f"/api/v1/services/{service.pk}/{suffix}"


def numbers(service):
    return list(Revision.objects.filter(service=service).order_by("number").values_list("number", flat=True))


def pod_templates(service):
    objects = render_service(spec_from_service(service))
    return {o["metadata"]["name"]: o["spec"].get("template") or o["spec"].get("leaderWorkerTemplate")
            for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet")}


def test_a_new_service_starts_at_revision_1_linked_to_its_audit_entry(service, owner_a):
    revision = Revision.objects.get(service=service)
    assert revision.number == 1
    assert revision.actor == owner_a
    assert revision.audit_entry == AuditEntry.objects.get(object_id=str(service.pk), action="create")
    assert revision.spec["runtime"] == service.runtime_id


@pytest.mark.parametrize(("body", "makes_revision"), [
    ({"runtime": "new"}, True),
    ({"engine_settings": {"max_num_seqs": 128}}, True),
    ({"adapters": "one"}, True),
    ({"pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 4, "gpus_per_replica": 2}]},
     True),
    ({"pools": [{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 4,
                 "gpu_type": "a100-sxm-80gb"}]}, True),
    ({"pools": [{"role": "engine", "replicas": 2, "min_replicas": 1, "max_replicas": 6}]}, False),
    ({"routing_policy": "session"}, True),
    ({"autoscaling": {"autoscaler": "builtin", "targets": {"waiting_requests_per_replica": 3}}}, False),
], ids=["runtime", "engine-setting", "adapter", "gpus-per-replica", "gpu-type", "replicas-and-bounds",
        "routing-policy-adds-a-router-pod", "autoscaling-targets"])
def test_only_changes_to_what_pods_run_make_a_revision(api, service, body, makes_revision):
    if body.get("runtime") == "new":
        body = {"runtime": RuntimeFactory(name="vllm-new", tag="v0.34.0").pk}
    if body.get("adapters") == "one":
        body = {"adapters": [AdapterFactory(base_model=service.model).pk]}
    response = api("operator_a").patch(url(service), body, format="json")
    assert response.status_code == 200, response.json()
    assert numbers(service) == ([1, 2] if makes_revision else [1])


def test_the_list_says_what_changed_in_words_and_marks_the_current_one(api, service):
    client = api("viewer_a")
    api("owner_a").patch(url(service), {"runtime": RuntimeFactory(name="vllm-new", tag="v0.34.0").pk}, format="json")
    body = client.get(url(service, "revisions/")).json()
    assert [(r["number"], r["current"]) for r in body] == [(2, True), (1, False)]
    assert {"path": "runtime", "before": "vllm-old", "after": "vllm-new"} in [
        {k: c[k] for k in ("path", "before", "after")} for c in body[0]["changes"]]
    assert body[0]["actor"] == "olivia-owner"
    assert body[1]["changes"][0]["before"] == "–"  # the first revision: everything set from nothing


def test_diff_between_any_two_revisions(api, service):
    client = api("owner_a")
    client.patch(url(service), {"engine_settings": {"max_num_seqs": 128}}, format="json")
    client.patch(url(service), {"engine_settings": {"max_num_seqs": 64}}, format="json")
    body = client.get(url(service, "revisions/3/diff/?against=1")).json()
    assert (body["to"], body["against"]) == (3, 1)
    assert [(c["path"], c["before"], c["after"]) for c in body["changes"]] == [
        ("engine_settings.max_num_seqs", "–", "64")]


@pytest.mark.parametrize("suffix", ["revisions/9/diff/?against=1", "revisions/1/diff/?against=9",
                                    "revisions/9/rollback/", "revisions/99999999999/rollback/",
                                    "revisions/1/diff/?against=99999999999"])
def test_an_unknown_revision_is_404(api, service, suffix):
    client = api("owner_a")
    response = client.post(url(service, suffix)) if suffix.endswith("rollback/") else client.get(url(service, suffix))
    assert response.status_code == 404


@pytest.mark.parametrize(("suffix", "field"), [("revisions/1/diff/", "against"),
                                               ("revisions/1/diff/?against=x", "against"),
                                               # Arabic-Indic one, and 1 then Arabic-Indic one: int() reads 1, 11.
                                               ("revisions/1/diff/?against=\u0661", "against"),
                                               ("revisions/1/diff/?against=1\u0661", "against"),
                                               ("revisions/?diff=1,2", "diff")])
def test_bad_query_is_400_naming_it(api, service, suffix, field):
    response = api("owner_a").get(url(service, suffix))
    assert response.status_code == 400
    assert field in response.json()


def test_another_tenant_sees_no_revision(api, service, member_b):
    client = api("member_b")
    assert client.get(url(service, "revisions/")).status_code == 404
    assert client.get(url(service, "revisions/1/diff/?against=1")).status_code == 404
    assert client.post(url(service, "revisions/1/rollback/")).status_code == 404
    assert not Revision.objects.restrict(member_b).exists()


def test_rollback_restores_the_pod_templates_exactly_and_is_audited(api, service):
    client = api("operator_a")
    templates_1 = pod_templates(service)
    client.patch(url(service), {"runtime": RuntimeFactory(name="vllm-new", tag="v0.34.0").pk,
                                "engine_settings": {"max_num_seqs": 64}}, format="json")
    client.post(url(service, "scale/"), {"pool": "engine", "replicas": 3}, format="json")
    assert pod_templates(service) != templates_1
    response = client.post(url(service, "revisions/1/rollback/"))
    assert response.status_code == 201, response.json()
    assert (response.json()["number"], response.json()["restored_from"]) == (3, 1)
    assert pod_templates(service) == templates_1
    service.refresh_from_db()
    assert service.pools.get().replicas == 3  # replicas are not part of a revision: kept
    entry = AuditEntry.objects.get(pk=response.json()["audit_entry"])
    assert (entry.action, entry.actor.username, entry.after["runtime"]) == ("update", "oscar-operator",
                                                                           service.runtime_id)
    assert Revision.objects.get(service=service, number=3).spec == Revision.objects.get(
        service=service, number=1).spec | {"pools": Revision.objects.get(service=service, number=3).spec["pools"]}


def test_rollback_to_what_runs_now_is_409_and_changes_nothing(api, service):
    client = api("owner_a")
    response = client.post(url(service, "revisions/1/rollback/"))
    assert response.status_code == 409
    assert "already" in response.json()["detail"]
    assert numbers(service) == [1]


def test_viewers_cannot_roll_back(api, service):
    api("owner_a").patch(url(service), {"engine_settings": {"max_num_seqs": 64}}, format="json")
    assert api("viewer_a").post(url(service, "revisions/1/rollback/")).status_code == 403
    assert numbers(service) == [1, 2]


def test_the_admin_action_rolls_back_and_is_audited_as_admin(api, service, staff):
    from django.test import Client
    from django.urls import reverse

    api("owner_a").patch(url(service), {"engine_settings": {"max_num_seqs": 64}}, format="json")
    client = Client()
    client.force_login(staff)
    changelist = reverse("admin:serving_revision_changelist")
    first = Revision.objects.get(service=service, number=1)
    response = client.post(changelist, {"action": "roll_back", "_selected_action": [first.pk]}, follow=True)
    assert "now runs revision 1" in response.content.decode()
    latest = Revision.objects.get(service=service, number=3)
    assert (latest.restored_from, latest.audit_entry.via, latest.actor) == (1, "admin", staff)
    service.refresh_from_db()
    assert service.engine_settings == {}
    response = client.post(changelist, {"action": "roll_back", "_selected_action": [first.pk]}, follow=True)
    assert "is what the service runs already" in response.content.decode()
    assert numbers(service) == [1, 2, 3]


def test_the_migration_gives_existing_services_revision_1_with_their_spec(tenant_a, owner_a):
    import importlib

    from django.apps import apps as registry

    from apps.core.audit import record_change
    from apps.serving.revisions import pod_spec
    from tests.factories import InferenceServiceFactory

    migration = importlib.import_module("apps.serving.migrations.0008_revisions")
    older = InferenceServiceFactory(tenant=tenant_a, engine_settings={"max_num_seqs": 64})  # made without revisions
    older.adapters.add(AdapterFactory(base_model=older.model))
    entry = record_change(actor=owner_a, obj=older, action="create", via="api")
    migration.first_revisions(registry, None)
    revision = Revision.objects.get(service=older)
    assert (revision.number, revision.audit_entry, revision.actor) == (1, entry, owner_a)
    assert revision.spec == pod_spec(InferenceService.objects.get(pk=older.pk))
