"""GET /api/v1/services/{id}/manifests/: the rendered objects, scoped like the service itself."""

from tests.factories import InferenceServiceFactory


def test_a_tenant_viewer_reads_the_objects_its_service_renders_to(api, tenant_a, viewer_a):
    svc = InferenceServiceFactory(tenant=tenant_a, name="chat")
    response = api("viewer_a").get(f"/api/v1/services/{svc.pk}/manifests/")
    assert response.status_code == 200
    body = response.json()
    kinds = [o["kind"] for o in body["objects"]]
    assert body["count"] == len(kinds)
    assert kinds.index("Namespace") < kinds.index("Deployment")  # apply order: the namespace first
    deployment = next(o for o in body["objects"] if o["kind"] == "Deployment")
    assert deployment["metadata"]["namespace"] == "tenant-alpha"
    assert deployment["metadata"]["labels"]["controlplane.io/service-uid"] == str(svc.uid)


def test_another_tenants_manifests_are_not_found(api, tenant_a, member_b):
    svc = InferenceServiceFactory(tenant=tenant_a, name="secret-project")
    response = api("member_b").get(f"/api/v1/services/{svc.pk}/manifests/")
    assert response.status_code == 404
    assert b"secret-project" not in response.content
