"""Property-based fuzzing of the whole API from its own OpenAPI schema (schemathesis over `/api/schema/`).

Every operation (each path and method the schema lists) is called with generated schema-valid and
schema-violating input, each case once as a tenant owner and once as platform staff, against the WSGI application
and real PostgreSQL. No response may be a server error, and every response must conform to the schema
(status code, content type, headers and body). Examples per operation and mode are bounded
(SCHEMATHESIS_EXAMPLES, default 10) so the walk takes a few minutes on two cores.

The walk is a few tests (parts of the operations, instead of one pytest item per operation) so the tenants, users
and tokens are made a few times, not once per operation; each operation's failures are collected and all are
reported together.

Two more strategies build on schemathesis's own cases for every write operation (POST, PUT, PATCH): one
puts a value nested up to 950 levels deep (lists, objects, or both in turn; under the JSON parser's own
limit, where a recursive walk of request data would overflow Python's stack) in one field of a generated
body, the other pads one field so the body lands just under, at or just over the body limit (lowered to
16 KiB here), where the answer past the limit must be 413 in JSON. Both run the same checks as above.
"""

from __future__ import annotations

import json
import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
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
WRITES = [op for op in OPERATIONS if op.method.upper() in ("POST", "PUT", "PATCH")]
BODY_LIMIT = 16 * 1024
SHAPED = settings(FUZZ, max_examples=3, phases=[Phase.generate])  # no shrinking: a failure shows its case
UNJUDGED = [schemathesis.checks.positive_data_acceptance, schemathesis.checks.negative_data_rejection]


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


def call_as_each(case, tokens: dict[str, str], **kwargs) -> list:
    """Send the case once per actor ({actor: token}), each response checked (`call_and_validate`): the responses.
    A failure names the actor it was sent as."""
    responses = []
    for actor, token in tokens.items():
        try:
            responses.append(case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, **kwargs))
        except (Exception, BaseExceptionGroup) as exc:
            exc.add_note(f"sent as {actor}")
            raise
    return responses


def fuzz_operation(operation, tokens: dict[str, str], mode: GenerationMode) -> None:
    @FUZZ
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        # Checked: no server error, and status code, content type, headers and body as the schema documents.
        # Not checked: whether the status "should" have been 2xx or 4xx. A schema-valid request may be
        # refused (a name taken, an id that does not exist, replicas above a pool's max), and a
        # schema-violating value may serialise to one the API accepts (an empty list becomes `?page_size=`,
        # which means "not given"); neither can be told from the schema.
        call_as_each(case, tokens, excluded_checks=UNJUDGED)

    run()


def nested_json(depth: int, kind: str) -> str:
    """JSON text `depth` levels deep (lists, objects, or both in turn), built as text: no recursion."""
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "dict":
        return '{"a":' * depth + "0" + "}" * depth
    return '[{"a":' * (depth // 2) + "0" + "}]" * (depth // 2)


def with_field(case, text_of_value) -> tuple[str, bytes]:
    """The case's generated JSON body (an object, or `{}`) with one of its fields, or `name`, set to the JSON
    text `text_of_value(field)`: (field, body bytes)."""
    body = case.body if isinstance(case.body, dict) and case.body else {"name": "x"}
    field = sorted(body)[0]
    rest = json.dumps({k: v for k, v in body.items() if k != field})
    value = text_of_value(field)
    return field, ("{" + json.dumps(field) + ":" + value + ("," + rest[1:] if rest != "{}" else "}")).encode()


def deep_cases(operation):
    """Schema-valid cases of the operation whose body has one field nested up to 950 levels deep."""
    def shape(case, depth, kind):
        case.body, case.media_type = with_field(case, lambda _f: nested_json(depth, kind))[1], "application/json"
        return case
    return st.builds(shape, operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
                     st.integers(1, 950), st.sampled_from(["list", "dict", "mixed"]))


def large_cases(operation):
    """Schema-valid cases of the operation whose body is padded to a size around the body limit."""
    def shape(case, size):
        _, bare = with_field(case, lambda _f: '""')
        case.body = with_field(case, lambda _f: json.dumps("x" * max(size - len(bare), 0)))[1]
        case.media_type = "application/json"
        case.headers = {}  # only the size is wrong (a generated If-Match may be refused first, rightly)
        return case
    return st.builds(shape, operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
                     st.sampled_from([BODY_LIMIT - 1, BODY_LIMIT, BODY_LIMIT + 1]) | st.integers(BODY_LIMIT - 64,
                                                                                                BODY_LIMIT + 64))


def shaped_operation(operation, tokens: dict[str, str], strategy) -> None:
    @SHAPED
    @given(case=strategy(operation))
    def run(case):
        for response in call_as_each(case, tokens, excluded_checks=UNJUDGED):
            if len(case.body) > BODY_LIMIT and response.status_code not in (401, 403, 404, 405):  # refused unread
                assert response.status_code == 413, (len(case.body), response.status_code, case.path_parameters,
                                                     case.query, response.content[:300])
                content_type = {k.lower(): v for k, v in response.headers.items()}["content-type"]
                assert content_type[0].startswith("application/json")

    run()


def described(exc: BaseException) -> str:
    """The failure with its notes (the actor it was sent as, Hypothesis's falsifying example)."""
    return "\n".join([str(exc), *getattr(exc, "__notes__", [])])


def fuzz_all(tokens: dict[str, str], operations: list) -> None:
    failures = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                fuzz_operation(operation, tokens, mode)
            except (Exception, BaseExceptionGroup) as exc:  # collect every operation's failure, report them all
                failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}):\n{described(exc)}")
    assert not failures, "\n\n".join(failures)


def shape_all(tokens: dict[str, str]) -> None:
    failures = []
    for operation in WRITES:
        for strategy in (deep_cases, large_cases):
            try:
                shaped_operation(operation, tokens, strategy)
            except (Exception, BaseExceptionGroup) as exc:  # collect every operation's failure, report them all
                failures.append(f"{operation.method.upper()} {operation.path} ({strategy.__name__}):\n{described(exc)}")
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


# The walk is cut into parts (every PARTS-th operation), so parallel workers share it and no part runs near the
# per-test timeout on a busy machine; together the parts walk every operation once. Each generated case is sent as
# the tenant owner and then as platform staff (generating the case costs more than sending it).
PARTS = 6
PART_IDS = [f"part{i + 1}of{PARTS}" for i in range(PARTS)]


def as_owner_and_staff(fuzz_world) -> dict[str, str]:
    return {"tenant owner": fuzz_world["owner_a"], "staff": fuzz_world["staff"]}


@pytest.mark.parametrize("part", range(PARTS), ids=PART_IDS)
def test_api_as_tenant_owner_and_staff(fuzz_world, part):
    fuzz_all(as_owner_and_staff(fuzz_world), OPERATIONS[part::PARTS])


def test_write_operations_take_deeply_nested_and_limit_sized_bodies_without_a_server_error(fuzz_world, settings):
    settings.API_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = BODY_LIMIT
    assert len(WRITES) >= 15
    shape_all(as_owner_and_staff(fuzz_world))
