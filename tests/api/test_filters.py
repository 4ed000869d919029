"""List filters: services by name, tenant, phase, model, cluster and deployment mode; catalog lists by name.
An unknown query parameter or a malformed filter value is a 400 naming it, on every list endpoint."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

from tests.factories import (
    AdapterFactory,
    ClusterFactory,
    InferenceServiceFactory,
    ModelFactory,
    RuntimeFactory,
)

LISTS = ["services", "models", "adapters", "runtimes", "clusters", "gpu-nodes", "tenants", "memberships",
         "tokens", "audit-entries"]


@pytest.fixture
def fleet(tenant_a, tenant_b):
    east, west = ClusterFactory(name="east"), ClusterFactory(name="west")
    llama, qwen = ModelFactory(name="llama"), ModelFactory(name="qwen")
    runtime = RuntimeFactory()
    made = {
        "llama70-on-l4": InferenceServiceFactory(tenant=tenant_a, name="llama70-on-l4", cluster=east, model=llama,
                                                 runtime=runtime),
        "llama70": InferenceServiceFactory(tenant=tenant_a, name="llama70", cluster=west, model=llama,
                                           runtime=runtime),
        "qwen-split": InferenceServiceFactory(
            tenant=tenant_b, name="qwen-split", cluster=east, model=qwen, runtime=runtime,
            deployment_mode="pd_disaggregated",
            pools=[{"role": "prefill", "replicas": 1}, {"role": "decode", "replicas": 1}]),
    }
    type(made["llama70"]).objects.filter(pk=made["llama70"].pk).update(phase="Ready")
    return {"llama": llama, "qwen": qwen, **made}


def names(client, query):
    response = client.get(f"/api/v1/services/?{query}")
    assert response.status_code == 200, response.json()
    return sorted(s["name"] for s in response.json()["results"])


def test_services_filter_by_each_declared_field(api, staff, fleet):
    client = api("staff")
    assert names(client, "name=llama70-on-l4") == ["llama70-on-l4"]
    assert names(client, "name=llama70") == ["llama70"]  # exact, not a prefix
    assert names(client, "name=nothing-here") == []
    assert names(client, "tenant=bravo") == ["qwen-split"]
    assert names(client, "phase=Ready") == ["llama70"]
    assert names(client, f"model={fleet['llama'].pk}") == ["llama70", "llama70-on-l4"]
    assert names(client, "cluster=east") == ["llama70-on-l4", "qwen-split"]
    assert names(client, "deployment_mode=pd_disaggregated") == ["qwen-split"]
    assert names(client, "cluster=east&tenant=alpha") == ["llama70-on-l4"]
    # Pagination, ordering, search and format parameters are not filters and are accepted.
    assert names(client, "ordering=-name&page=1&page_size=1&search=llama&format=json") == ["llama70-on-l4"]


def test_a_tenant_filtering_by_name_never_sees_another_tenants_service(api, owner_a, fleet):
    assert names(api("owner_a"), "name=qwen-split") == []
    assert names(api("owner_a"), f"model={fleet['qwen'].pk}") == []


@pytest.mark.parametrize(
    ("query", "field"),
    [("phase=Sleeping", "phase"), ("deployment_mode=sideways", "deployment_mode"), ("model=llama", "model")],
)
def test_a_malformed_filter_value_is_a_400_naming_the_filter(api, staff, fleet, query, field):
    response = api("staff").get(f"/api/v1/services/?{query}")
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize("resource", LISTS)
def test_an_unknown_query_parameter_is_a_400_naming_it_on_every_list(api, staff, resource):
    response = api("staff").get(f"/api/v1/{resource}/?nmae=x&page_size=5")
    assert response.status_code == 400
    assert list(response.json()) == ["nmae"]


def test_an_unknown_parameter_on_a_single_object_is_not_a_filter_question(api, staff, fleet):
    # The lookup of one object runs through the filter backends too; only lists refuse unknown names.
    assert api("staff").get(f"/api/v1/services/{fleet['llama70'].pk}/?expand=pools").status_code == 200


@pytest.mark.parametrize("resource", ["models", "adapters", "runtimes"])
def test_catalog_lists_filter_by_name(api, staff, resource):
    made = {"models": ModelFactory, "adapters": AdapterFactory, "runtimes": RuntimeFactory}[resource]
    made(name="wanted")
    made(name="wanted-not")
    response = api("staff").get(f"/api/v1/{resource}/?name=wanted")
    assert response.status_code == 200
    assert [e["name"] for e in response.json()["results"]] == ["wanted"]


def test_the_schema_documents_the_filters():
    schema = SchemaGenerator().get_schema(request=None, public=True)

    def parameters(path):
        return {p["name"] for p in schema["paths"][path]["get"]["parameters"]}

    assert {"name", "tenant", "phase", "model", "cluster", "deployment_mode"} <= parameters("/api/v1/services/")
    for path in ("/api/v1/models/", "/api/v1/adapters/", "/api/v1/runtimes/"):
        assert "name" in parameters(path)
