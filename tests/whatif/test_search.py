"""The inverse question: a search for the cheapest configurations meeting the SLO, pruned by the capacity planner
before anything replays, from the command line and the API; expected fronts worked out by hand."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from apps.whatif.lab import Load
from apps.whatif.models import Run, RunStatus
from apps.whatif.runs import execute
from apps.whatif.scenarios import service_slo
from apps.whatif.search import Shape, Space, replicas_needed, search
from capacity.traces import TraceRequest
from tests.factories import InferenceServiceFactory
from tests.whatif.test_api import jsonl, upload

pytestmark = pytest.mark.django_db

# Only GPU type and TP vary: no engine setting, routing or headroom stage.
HARDWARE_ONLY = dict(kv_cache_dtypes=(), max_num_seqs=(), max_num_batched_tokens=(), cpu_tier=False,
                     speculative=False, routing=(), headroom=False)


def spaced_load(n: int, gap_s: float, prompt: int = 500, output: int = 50) -> Load:
    return Load("test", [TraceRequest(i * gap_s, prompt, output) for i in range(n)])


def chat(tenant=None, gpus=1, **engine):
    return InferenceServiceFactory(
        **({"tenant": tenant} if tenant else {"tenant__slug": "alpha"}), name="chat",
        pools=[{"role": "engine", "replicas": 1, "min_replicas": 1, "max_replicas": 1, "gpu_type": "l4-24gb",
                "gpus_per_replica": gpus}],
        engine_settings={"max_model_len": 8192, **engine})


def test_a_search_over_tp_1_and_2_on_l4s_keeps_the_cheaper_of_two_configurations_meeting_the_slo():
    # One 500-token request every 10 s for 600 s: 6 in the busiest minute, 0.1 requests/s, which one replica of
    # either TP serves far within 2 s, so the planner sizes both to 1-1 replicas. On an idle engine every request
    # meets its TTFT budget and ITL. Cost: 1 L4 x 600 s = 0.17 GPU-h (TP 1); TP 2 holds at least 2 L4s x 600 s =
    # 0.33 GPU-h and can meet no more than every request, so once TP 1 (the planner's cheaper) has replayed, TP 2
    # is dropped unreplayed as dominated. The front is TP 1 alone, and it is chosen.
    result = search(chat(), spaced_load(61, 10.0), Space(gpu_types=("l4-24gb",), tps=(1, 2), **HARDWARE_ONLY))
    assert result["replayed"] == 2 and result["cost_axis"] == "gpu_hours"  # the current configuration and TP 1
    assert [(p["config"]["gpus_per_replica"], p["reason"][:30]) for p in result["pruned"]] == [
        (2, "dominated: costs at least 0.33")]
    assert [(r["name"], r["gpu_hours"], r["slo_attainment"], r["itl_slo_attainment"]) for r in result["front"]] == [
        ("1 × L4 (TP 1), 1–1 replicas", 0.17, 1.0, 1.0)]
    assert result["chosen"]["name"] == "1 × L4 (TP 1), 1–1 replicas" and result["reason"] is None
    assert result["current"]["gpu_hours"] == 0.17
    config = result["chosen"]["config"]
    assert (config["gpu_type"], config["gpus_per_replica"], config["min_replicas"], config["max_replicas"]) == (
        "l4-24gb", 1, 1, 1)
    assert config["engine_settings"]["tensor_parallel_size"] == 1
    assert config["autoscaling"]["autoscaler"] == "builtin"


def test_the_planner_drops_a_replica_that_cannot_hold_the_context_without_replaying_it():
    # max_model_len 131072 of Llama 3.1 8B: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 128 KiB a token, 16 GiB
    # for one request. One L4 (24 GiB x 0.9 = 21.6 GiB) holds 14.96 GiB of weights and so at most 6.6 GiB of KV:
    # TP 1 cannot start. At TP 2 each GPU holds half the weights (7.5 GiB) and half of each token (8 GiB in all).
    service = chat(gpus=2, max_model_len=131072)
    result = search(service, spaced_load(13, 10.0), Space(gpu_types=("l4-24gb",), tps=(1, 2), **HARDWARE_ONLY))
    assert [p["config"] for p in result["pruned"]] == [{"gpu_type": "l4-24gb", "gpus_per_replica": 1}]
    assert "max_model_len 131072 is above the KV cache's capacity" in result["pruned"][0]["reason"]
    assert result["replayed"] == 2  # the current configuration and TP 2; TP 1 never replayed
    assert [r["config"]["gpus_per_replica"] for r in result["front"]] == [2]


def test_the_planner_drops_a_fleet_that_cannot_reach_the_loads_throughput():
    # 1,000 requests/s of 8,192-token prompts is 8.2 M prompt tokens/s; one L4 prefills about
    # 0.5 x 121 TFLOP/s / (2 x 8.03 G parameters) = 3,770 tokens/s, so even 32 replicas (120 k tokens/s) cannot.
    service = chat()
    shape = Shape(prompt=8192, output=100, peak_rate=1000.0, low_rate=1000.0, hours=1.0)
    settings = service.engine_settings_obj()
    needed, why = replicas_needed(service, settings, "l4-24gb", 1, shape, 1000.0, service_slo({}).ttft_s)
    assert needed is None and "32 replicas of 1 × L4 cannot serve the busiest minute's 1000.00 requests/s" in why
    # One 500-token prompt every 10 s: its 0.13 s prefill keeps the replica busy 1.3 % of the time, under the
    # 5 % from which the M/M/1 p95 wait is not zero, so one replica meets the budget.
    light = Shape(prompt=500, output=50, peak_rate=0.1, low_rate=0.1, hours=1.0)
    assert replicas_needed(service, settings, "l4-24gb", 1, light, 0.1, 2.0) == (1, "")


def test_the_command_ends_with_the_front_on_one_json_line(tmp_path):
    chat()
    path = tmp_path / "load.jsonl"
    path.write_bytes(jsonl(20))
    out = StringIO()
    call_command("whatif", "--service", "alpha/chat", "--trace", str(path), "--format", "jsonl", "--search",
                 "--json", stdout=out)
    result = json.loads(out.getvalue().strip().splitlines()[-1])
    assert {"front", "chosen", "wall_s"} <= set(result) and isinstance(result["wall_s"], float)
    for row in result["front"]:
        assert isinstance(row["config"], dict) and {"gpu_type", "gpus_per_replica", "min_replicas",
                                                    "max_replicas"} <= set(row["config"])
        assert all(isinstance(row[k], float | int) for k in ("gpu_hours", "slo_attainment", "itl_slo_attainment"))
    # One 400-token request every 2 s: one L4 at TP 1 serves it, the least any configuration can hold.
    assert result["chosen"] in result["front"]
    assert (result["chosen"]["config"]["gpus_per_replica"], result["chosen"]["config"]["max_replicas"]) == (1, 1)


def test_a_search_started_through_the_api_is_replayed_by_the_worker_and_its_choice_applies(api, owner_a, tenant_a):
    service = chat(tenant_a)
    trace = upload(api("owner_a"), jsonl(30)).json()
    client = api("owner_a")
    response = client.post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"], "search": True},
                           format="json")
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["search"] is True and execute(run["id"]) == RunStatus.SUCCEEDED
    done = client.get(f"/api/v1/whatif/{run['id']}/").json()
    chosen = done["result"]["chosen"]
    assert chosen is not None and chosen["name"] in {s["name"] for s in done["result"]["scenarios"]}
    assert done["result"]["scenarios"][0]["name"] == "current"
    applied = client.post(f"/api/v1/whatif/{run['id']}/apply/", {"scenario": chosen["name"]}, format="json")
    assert applied.status_code == 200, applied.content
    assert applied.json()["autoscaling"]["autoscaler"] == "builtin"  # the service ran a fixed fleet before


def test_another_tenants_search_is_a_404_and_bad_input_a_400_naming_the_field(api, owner_a, member_b, tenant_a):
    service = chat(tenant_a)
    trace = upload(api("owner_a"), jsonl(5)).json()
    run = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"], "search": True},
                              format="json").json()
    assert api("member_b").get(f"/api/v1/whatif/{run['id']}/").status_code == 404
    assert api("member_b").post(f"/api/v1/whatif/{run['id']}/apply/", {"scenario": "x"},
                                format="json").status_code == 404
    stored = Run.objects.count()
    other = api("member_b").post("/api/v1/whatif/", {"service": service.pk, "search": True}, format="json")
    assert other.status_code == 400 and "service" in other.json()
    both = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"], "search": True,
                                                   "alternatives": [{"name": "two", "replicas": 2}]}, format="json")
    assert both.status_code == 400 and both.json() == {
        "alternatives": ["A search chooses its own configurations; leave alternatives out."]}
    typed = api("owner_a").post("/api/v1/whatif/", {"service": service.pk, "trace": trace["id"], "search": "maybe"},
                                format="json")
    assert typed.status_code == 400 and "search" in typed.json()
    assert Run.objects.count() == stored
