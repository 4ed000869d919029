"""One reusable mixin for CRUD through the API: list, get, create, update and delete of a resource,
each checked against the database and the audit log. A resource's test class only says how to make
one, what to send, and what the update changes."""

from __future__ import annotations

import pytest
from django.contrib.contenttypes.models import ContentType

from apps.core.models import AuditEntry
from tests.factories import ClusterFactory, ModelFactory, RuntimeFactory


class CrudTests:
    resource: str  # the URL segment: /api/v1/<resource>/
    actor: str = "staff"
    delete_status: int = 204
    lookup: str = "name"  # a field whose value identifies the object in responses

    # -- what each resource says --------------------------------------------------------------
    def make(self, world):
        raise NotImplementedError

    def create_payload(self, world) -> dict:
        raise NotImplementedError

    def update_payload(self, world) -> dict:
        raise NotImplementedError

    def assert_updated(self, obj, payload) -> None:
        for field, value in payload.items():
            assert getattr(obj, field) == value

    def assert_deleted(self, model, pk) -> None:
        assert not model.objects.filter(pk=pk).exists()

    # -- shared world ----------------------------------------------------------------------------
    @pytest.fixture
    def world(self, tenant_a, owner_a, operator_a, staff):
        return {
            "tenant": tenant_a,
            "owner": owner_a,
            "cluster": ClusterFactory(name="sim"),
            "model": ModelFactory(name="llama-shared"),
            "runtime": RuntimeFactory(name="vllm-shared"),
        }

    @pytest.fixture
    def client(self, api, world):
        return api(self.actor)

    def url(self, pk=None) -> str:
        return f"/api/v1/{self.resource}/" + (f"{pk}/" if pk is not None else "")

    def audited(self, obj_or_model, pk, action) -> bool:
        return AuditEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(obj_or_model), object_id=str(pk), action=action, via="api"
        ).exists()

    # -- the tests -------------------------------------------------------------------------------
    def test_list_includes_the_object(self, client, world):
        obj = self.make(world)
        response = client.get(self.url())
        assert response.status_code == 200
        assert str(getattr(obj, self.lookup)) in [str(row[self.lookup]) for row in response.json()["results"]]

    def test_get_returns_the_object(self, client, world):
        obj = self.make(world)
        response = client.get(self.url(obj.pk))
        assert response.status_code == 200
        assert response.json()["id"] == obj.pk

    def test_create_persists_and_is_audited(self, client, world):
        response = client.post(self.url(), self.create_payload(world), format="json")
        assert response.status_code == 201, response.content
        pk = response.json()["id"]
        obj = type(self.make(world)).objects.get(pk=pk)
        assert self.audited(obj, pk, "create")

    def test_update_persists_and_is_audited(self, client, world):
        obj = self.make(world)
        payload = self.update_payload(world)
        response = client.patch(self.url(obj.pk), payload, format="json")
        assert response.status_code == 200, response.content
        obj.refresh_from_db()
        self.assert_updated(obj, payload)
        entry = AuditEntry.objects.get(
            object_id=str(obj.pk), action="update", via="api", content_type=ContentType.objects.get_for_model(obj)
        )
        assert entry.before != entry.after

    def test_delete_is_audited(self, client, world):
        obj = self.make(world)
        model, pk = type(obj), obj.pk
        response = client.delete(self.url(pk))
        assert response.status_code == self.delete_status, response.content
        self.assert_deleted(model, pk)
        assert self.audited(model, pk, "delete")

    def test_unknown_id_is_404(self, client, world):
        assert client.get(self.url(987654)).status_code == 404
