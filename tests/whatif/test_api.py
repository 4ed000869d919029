"""The what-if API: traces uploaded (bad rows named by line and column, nothing stored on error), runs started,
replayed by the task's code, read with results, cancelled and bounded; every object scoped to its tenant."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.core.models import AuditEntry
from apps.whatif.models import GpuPrice, Run, RunStatus, Trace
from apps.whatif.runs import execute
from tests.factories import InferenceServiceFactory
from tests.polling import wait_for
from tests.rollouts.conftest import canary_service  # noqa: F401 (a service with a canary strategy, revision 1 stable)
from tests.workers.conftest import workers  # noqa: F401 (the real-worker fixture)

pytestmark = pytest.mark.django_db

AZURE_BAD = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,12,3\n2023-11-16 x,12,3\n"
             "2023-11-16 18:15:48.00,-4,3\n")


def jsonl(n: int, gap_s: float = 2.0) -> bytes:
    return "\n".join(json.dumps({"timestamp": i * gap_s, "prompt_tokens": 400, "output_tokens": 30})
                     for i in range(n)).encode()


@pytest.fixture
def service(tenant_a):
    return InferenceServiceFactory(
        tenant=tenant_a, name="chat",
        pools=[{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 2, "gpu_type": "l4-24gb"}],
        engine_settings={"max_model_len": 8192})


def upload(client, content: bytes, name="hour", fmt="jsonl", tenant="alpha"):
    return client.post("/api/v1/whatif-traces/", {"tenant": tenant, "name": name, "format": fmt,
                                                  "file": SimpleUploadedFile("t.txt", content)})


@pytest.fixture
def trace(api, owner_a):
    response = upload(api("owner_a"), jsonl(30))
    assert response.status_code == 201, response.content
    return response.json()


def test_an_upload_is_parsed_summarised_stored_and_audited(trace):
    # 30 requests 2 s apart: 58 s from the first to the last.
    assert (trace["requests"], trace["duration_s"], trace["format"], trace["tenant"]) == (30, 58.0, "jsonl", "alpha")
    stored = Trace.objects.get(pk=trace["id"])
    assert bytes(stored.data) == jsonl(30) and stored.size_bytes == len(jsonl(30))
    entry = AuditEntry.objects.get(object_id=str(stored.pk), content_type__model="trace")
    assert entry.after["data"] == "<redacted>" and entry.after["requests"] == 30


def test_a_bad_row_is_a_400_naming_its_line_and_column_and_stores_nothing(api, owner_a):
    response = upload(api("owner_a"), AZURE_BAD.encode(), fmt="azure")
    assert response.status_code == 400
    problems = response.json()["file"]
    assert any(p.startswith("line 3, column TIMESTAMP") for p in problems), problems
    assert any(p.startswith("line 4, column ContextTokens") for p in problems), problems
    assert Trace.objects.count() == 0 and not AuditEntry.objects.filter(content_type__model="trace").exists()


@pytest.mark.parametrize(("content", "where"), [
    # 10,000 brackets: deeper than the interpreter's JSON parser goes.
    (jsonl(2) + b"\n" + b"[" * 10_000, "line 3: not JSON this parser reads (nested too deeply)"),
    # A field nested 600 deep parses, and is refused as the wrong type without being quoted back.
    (jsonl(1) + b"\n" + json.dumps({"timestamp": 1, "prompt_tokens": 10,
                                    "output_tokens": json.loads("[" * 600 + "]" * 600)}).encode(),
     "line 2, column output_tokens: an array is not a whole number of tokens"),
    (jsonl(1) + b'\n{"timestamp": 1e308, "prompt_tokens": 1, "output_tokens": 1}', "line 2, column timestamp: "),
    (b'{"timestamp": "0001-01-01T00:00:00", "prompt_tokens": 1, "output_tokens": 1}\n'
     b'{"timestamp": "9999-12-31T00:00:00", "prompt_tokens": 1, "output_tokens": 1}', "line 1, column timestamp: "),
    (jsonl(2, gap_s=8 * 86400), "line 2, column timestamp: 8.0 days after the first arrival (line 1)"),
])
def test_a_nested_or_unbounded_trace_is_a_400_naming_the_line_and_stores_nothing(api, owner_a, content, where):
    response = upload(api("owner_a"), content)
    assert response.status_code == 400, response.content
    assert any(p.startswith(where) for p in response.json()["file"]), response.json()
    assert Trace.objects.count() == 0


def test_an_upload_over_the_size_limit_is_refused(api, owner_a, settings):
    settings.WHATIF_TRACE_MAX_BYTES = 100
    response = upload(api("owner_a"), jsonl(30))  # 30 lines of about 60 bytes
    assert response.status_code == 400 and response.json()["file"] == [
        "The trace is larger than 100 bytes, the most that may be uploaded (WHATIF_TRACE_MAX_BYTES)."]
    assert Trace.objects.count() == 0


def test_traces_are_their_tenants_own(api, trace, member_b, viewer_a):
    assert api("member_b").get(f"/api/v1/whatif-traces/{trace['id']}/").status_code == 404
    assert api("member_b").get("/api/v1/whatif-traces/").json()["results"] == []
    refused = upload(api("member_b"), jsonl(3), name="mine")
    assert refused.status_code == 400 and "tenant" in refused.json()
    assert upload(api("viewer_a"), jsonl(3), name="v").status_code == 403
    assert Trace.objects.count() == 1


def test_a_run_on_a_trace_is_queued_then_replayed_with_results(api, service, trace):
    response = api("owner_a").post("/api/v1/whatif/", {
        "service": service.pk, "trace": trace["id"],
        "alternatives": [{"name": "two replicas", "replicas": 2}]}, format="json")
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "queued" and run["window_start"] is None

    assert execute(run["id"]) == RunStatus.SUCCEEDED
    assert execute(run["id"]) is None  # claimed once only

    done = api("owner_a").get(f"/api/v1/whatif/{run['id']}/").json()
    assert (done["status"], done["progress"]) == ("succeeded", 1.0)
    scenarios = {s["name"]: s for s in done["result"]["scenarios"]}
    assert list(scenarios) == ["current", "two replicas"]
    # No autoscaler: 1 and 2 L4s held for the 58 s of load = 58/3600 and 116/3600 GPU-hours (0.02 and 0.03).
    assert (scenarios["current"]["gpu_hours"], scenarios["two replicas"]["gpu_hours"]) == (0.02, 0.03)
    assert done["result"]["requests"] == 30 and len(scenarios["current"]["timeline"]) >= 3
    assert AuditEntry.objects.filter(content_type__model="run", object_id=str(run["id"])).count() == 1


def test_alternatives_the_service_refuses_are_a_400_and_nothing_is_stored(api, service, trace):
    response = api("owner_a").post("/api/v1/whatif/", {
        "service": service.pk, "trace": trace["id"],
        "alternatives": [{"name": "tp3", "engine_settings": {"tensor_parallel_size": 3}}, {"name": "x", "nope": 1}]},
        format="json")
    assert response.status_code == 400
    problems = response.json()["alternatives"]
    assert any(p.startswith("alternatives[1].nope: unknown field") for p in problems), problems
    nine = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"],
                                                   "alternatives": [{"name": f"a{i}"} for i in range(9)]}, format="json")
    assert nine.status_code == 400 and "alternatives" in nine.json()
    assert Run.objects.count() == 0


def test_a_recorded_run_without_recorded_load_is_a_400(api, service):
    response = api("owner_a").post("/api/v1/whatif/", {"service": service.pk}, format="json")
    assert response.status_code == 400 and "no recorded load for alpha/chat" in response.json()["trace"][0]
    assert Run.objects.count() == 0


def test_runs_are_scoped_to_the_services_tenant(api, service, trace, member_b, viewer_a):
    run = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"]}, format="json").json()
    assert api("member_b").get(f"/api/v1/whatif/{run['id']}/").status_code == 404
    assert api("member_b").post(f"/api/v1/whatif/{run['id']}/cancel/").status_code == 404
    other = api("member_b").post("/api/v1/whatif/", {"service": service.pk}, format="json")
    assert other.status_code == 400 and "service" in other.json()
    own = InferenceServiceFactory(tenant=member_b.memberships.get().tenant, name="b-chat")
    mixed = api("member_b").post("/api/v1/whatif/", {"service": own.pk, "trace": trace["id"]}, format="json")
    assert mixed.status_code == 400 and "trace" in mixed.json()  # another tenant's trace is not found
    assert api("viewer_a").get(f"/api/v1/whatif/{run['id']}/").status_code == 200
    assert api("viewer_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"]},
                                format="json").status_code == 403
    assert Run.objects.count() == 1


def test_a_queued_run_cancels_at_once_and_a_finished_one_cannot(api, service, trace):
    client = api("owner_a")
    run = client.post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"]}, format="json").json()
    cancelled = client.post(f"/api/v1/whatif/{run['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert execute(run["id"]) is None  # a worker picking it up later does nothing
    again = client.post(f"/api/v1/whatif/{run['id']}/cancel/")
    assert again.status_code == 400 and "nothing to cancel" in again.json()["status"][0]


def test_a_cancel_reaching_a_running_run_stops_it(api, service, trace):
    run = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"]}, format="json").json()
    # The cancel arrives once the worker holds the run: the flag is what cancel_run sets on a running run.
    Run.objects.filter(pk=run["id"]).update(cancel_requested=True)
    assert execute(run["id"]) == RunStatus.CANCELLED
    assert Run.objects.get(pk=run["id"]).message == "Cancelled while it ran."


def test_a_run_over_its_cpu_budget_stops_and_says_so(api, service, trace, settings):
    settings.WHATIF_CPU_BUDGET_SECONDS = 0
    run = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"]}, format="json").json()
    assert run["cpu_budget_s"] == 0.0
    assert execute(run["id"]) == RunStatus.STOPPED
    stopped = Run.objects.get(pk=run["id"])
    assert "over the CPU budget of 0 s" in stopped.message and stopped.result["scenarios"] == []


def test_a_run_over_its_wall_clock_budget_stops_and_says_so(api, service, trace, settings):
    settings.WHATIF_WALL_BUDGET_SECONDS = 0
    run = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"]}, format="json").json()
    assert execute(run["id"]) == RunStatus.STOPPED
    stopped = Run.objects.get(pk=run["id"])
    assert "over the wall-clock budget of 0 s" in stopped.message and stopped.result["scenarios"] == []


def test_a_load_larger_than_a_run_replays_is_refused_at_start_and_fails_a_stored_run(api, service, trace, settings):
    client = api("owner_a")
    queued = client.post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"]}, format="json").json()
    settings.WHATIF_MAX_REQUESTS = 29  # the trace has 30
    refused = client.post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"]}, format="json")
    assert refused.status_code == 400
    assert refused.json()["trace"] == ["the load has 30 requests; a run replays at most 29 (WHATIF_MAX_REQUESTS)"]
    assert Run.objects.count() == 1
    # A run queued before the limit was lowered fails with the reason, before any replay.
    assert execute(queued["id"]) == RunStatus.FAILED
    failed = Run.objects.get(pk=queued["id"])
    assert failed.message == "the load has 30 requests; a run replays at most 29 (WHATIF_MAX_REQUESTS)"
    assert failed.result is None


@pytest.mark.integration
def test_a_worker_of_the_whatif_queue_alone_runs_a_started_run_off_the_web_process(
        api, service, trace, workers):  # noqa: F811
    workers(1, only=("whatif",))  # runs travel on their own queue, so reconciles never wait behind a replay
    run = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"], "alternatives": []},
                              format="json").json()
    wait_for(lambda: Run.objects.get(pk=run["id"]).finished, timeout=90, message="the run finished")
    done = Run.objects.get(pk=run["id"])
    assert done.status == RunStatus.SUCCEEDED and done.started_at is not None
    assert [s["name"] for s in done.result["scenarios"]] == ["current"]


def test_costs_come_from_the_price_table_and_apply_changes_the_service_through_its_own_validation(
        api, service, trace):
    GpuPrice.objects.create(gpu_type="l4-24gb", usd_per_gpu_hour="0.80")
    client = api("owner_a")
    run = client.post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"], "alternatives": [
        {"name": "two replicas", "replicas": 2, "max_replicas": 2},
        {"name": "fp8", "engine_settings": {"kv_cache_dtype": "fp8"}}]}, format="json").json()
    execute(run["id"])
    scenarios = {s["name"]: s for s in client.get(f"/api/v1/whatif/{run['id']}/").json()["result"]["scenarios"]}
    two = scenarios["two replicas"]
    # 0.03 GPU-h x $0.80 = $0.024 over the load's 30 x (400 + 30) = 12,900 tokens: $1.8605 per million.
    assert two["tokens"] == 12_900 and two["cost_usd"] == 0.024
    assert two["cost_per_mtok_usd"] == round(0.024 / 12_900 * 1e6, 4)

    version = service.version
    applied = client.post(f"/api/v1/whatif/{run['id']}/apply/", {"scenario": "two replicas"}, format="json")
    assert applied.status_code == 200, applied.content
    engine = next(p for p in applied.json()["pools"] if p["role"] == "engine")
    assert (engine["replicas"], engine["max_replicas"]) == (2, 2)
    service.refresh_from_db()
    assert service.version == version + 1
    assert AuditEntry.objects.for_object(service).filter(via="api", action="update").count() == 1

    assert client.post(f"/api/v1/whatif/{run['id']}/apply/", {"scenario": "current"},
                       format="json").status_code == 400
    assert client.post(f"/api/v1/whatif/{run['id']}/apply/", {"scenario": "nope"}, format="json").json() == {
        "scenario": ["The run has no scenario named 'nope'."]}


def test_bodies_with_nul_characters_or_mistyped_fields_are_400s(api, service, trace):
    client = api("owner_a")
    nul = upload(client, jsonl(3), name="a\x00b")
    assert nul.status_code == 400 and nul.json() == {"name": ["Null characters (U+0000) are not allowed."]}
    typed = client.post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"], "alternatives": [
        {"name": "x", "replicas": "two", "gpu_type": 4}]}, format="json")
    assert typed.status_code == 400
    assert typed.json()["alternatives"] == ["alternatives[0].gpu_type must be a GPU type's name",
                                            "alternatives[0].replicas must be a whole number from 0 to 10000"]


def test_applying_an_alternative_to_a_canary_service_rolls_it_out_through_the_canary(
        canary_service, owner_a):  # noqa: F811
    from apps.rollouts.models import Rollout
    from apps.rollouts.plan import desired_spec
    from apps.whatif.apply import apply_scenario

    run = Run.objects.create(service=canary_service, cpu_budget_s=1.0, status=RunStatus.SUCCEEDED, result={
        "scenarios": [{"name": "current", "changes": {}},
                      {"name": "fp8 KV cache", "changes": {"engine_settings": {"kv_cache_dtype": "fp8"}}}]})
    service = apply_scenario(run, "fp8 KV cache", actor=owner_a, via="api")
    desired_spec(service)  # the reconciler's next look: the new revision starts beside the stable one
    rollout = Rollout.objects.get(service=canary_service)
    assert (rollout.from_revision, rollout.to_revision) == (1, 2)
    assert rollout.active and rollout.weight == rollout.steps[0]["weight"]
    assert service.engine_settings["kv_cache_dtype"] == "fp8"
