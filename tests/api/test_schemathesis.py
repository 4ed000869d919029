"""Property-based fuzzing of the whole API from its own OpenAPI schema (schemathesis over `/api/schema/`).

Every operation (each path and method the schema lists) is called with generated schema-valid and
schema-violating input, once as platform staff and once as a tenant owner, against the WSGI application
and real PostgreSQL. No response may be a server error, and every response must conform to the schema
(status code, content type, headers and body). Examples per operation and mode are bounded
(SCHEMATHESIS_EXAMPLES, default 10) so both runs take a few minutes on two cores.

One test per actor walks every operation (instead of one pytest item per operation) so the tenants,
users and tokens are made once per actor, not once per operation; each operation's failures are
collected and all are reported together.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from controlplane.wsgi import application
from tests.factories import AdapterFactory, ClusterFactory, InferenceServiceFactory, ModelFactory, RuntimeFactory
from tests.factories import issue_token as make_token

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "10"))
# Loaded when the module is collected: the schema view needs no database.
SCHEMA = schemathesis.openapi.from_wsgi("/api/schema/", application)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck), report_multiple_bugs=False)


@pytest.fixture
def fuzz_world(request, db, settings, tenant_a, tenant_b, owner_a, member_b, staff):
    """Objects for generated ids to hit, and budgets large enough for a fuzzing run."""
    settings.API_THROTTLE_RATES = {"user": "1000000/min", "anon": "1000000/min"}
    # As Django's test client does: the test's transaction holds the connection, so requests must not
    # close it when they finish.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    request.addfinalizer(lambda: (request_started.connect(close_old_connections),
                                  request_finished.connect(close_old_connections)))
    cluster = ClusterFactory(name="sim")
    model = ModelFactory(name="llama-shared")
    runtime = RuntimeFactory(name="vllm-shared")
    for tenant, name in ((tenant_a, "alpha-chat"), (tenant_b, "bravo-chat")):
        InferenceServiceFactory(tenant=tenant, name=name, cluster=cluster, model=model, runtime=runtime)
    AdapterFactory(base_model=model, name="lora-shared")
    return {"staff": make_token(staff)[1], "owner_a": make_token(owner_a, tenant_a)[1]}


def fuzz_operation(operation, token: str, mode: GenerationMode) -> None:
    headers = {"Authorization": f"Bearer {token}"}

    @FUZZ
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        # Checked: no server error, and status code, content type, headers and body as the schema documents.
        # Not checked: whether the status "should" have been 2xx or 4xx. A schema-valid request may be
        # refused (a name taken, an id that does not exist, replicas above a pool's max), and a
        # schema-violating value may serialise to one the API accepts (an empty list becomes `?page_size=`,
        # which means "not given"); neither can be told from the schema.
        case.call_and_validate(headers=headers, excluded_checks=[
            schemathesis.checks.positive_data_acceptance, schemathesis.checks.negative_data_rejection,
        ])

    run()


def fuzz_all(token: str) -> None:
    failures = []
    for operation in OPERATIONS:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz_operation(operation, token, mode)
            except (Exception, BaseExceptionGroup) as exc:  # collect every operation's failure, report them all
                failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}):\n{exc}")
    assert not failures, "\n\n".join(failures)


def test_the_schema_lists_every_endpoint():
    # The fuzzing below is only as wide as the schema: every API route must be in it.
    paths = {op.path for op in OPERATIONS}
    for resource in ("tenants", "memberships", "tokens", "models", "adapters", "runtimes", "clusters", "gpu-nodes",
                     "services", "audit-entries"):
        assert f"/api/v1/{resource}/" in paths and f"/api/v1/{resource}/{{id}}/" in paths
    assert {"/api/v1/services/{id}/scale/", "/api/v1/services/{id}/metrics/", "/api/v1/services/{id}/manifests/",
            "/api/v1/tokens/{id}/rotate/"} <= paths
    assert len(OPERATIONS) >= 50


def test_api_as_staff(fuzz_world):
    fuzz_all(fuzz_world["staff"])


def test_api_as_tenant_owner(fuzz_world):
    fuzz_all(fuzz_world["owner_a"])
