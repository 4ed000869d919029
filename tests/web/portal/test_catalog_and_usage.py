"""The private catalog in the portal (a model filled from a pasted config.json), the GPU figures of the
overview worked out by hand, and the capacity slot."""

from __future__ import annotations

import json
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from apps.catalog.models import Model
from apps.telemetry.choices import Resolution
from apps.telemetry.models import SeriesPoint
from apps.telemetry.usage import gpu_hours, gpus_by_type
from tests.catalog.test_hfconfig import LLAMA_31_8B
from tests.factories import InferenceServiceFactory

MODEL_FIELDS = {"name": "my-llama", "source_uri": "hf://me/my-llama", "license": "llama3.1"}


def test_pasting_a_config_fills_the_architecture_fields(login, operator_a):
    url = reverse("web:catalog-create", args=["alpha", "models"])
    filled = login(operator_a).post(url, {**MODEL_FIELDS, "hf_config": json.dumps(LLAMA_31_8B), "fill": "1"})
    assert filled.status_code == 200
    initial = filled.context["form"].initial
    assert (initial["layers"], initial["kv_heads"], initial["max_context"], initial["parameters_billions"]) == (
        32, 8, 131072, 8.03)
    assert initial["name"] == "my-llama"  # what the user typed stays
    saved = login(operator_a).post(url, {k: v for k, v in initial.items() if k != "hf_config"})
    assert saved.status_code == 302
    model = Model.objects.get(tenant__slug="alpha", name="my-llama")
    assert (model.hidden_size, model.head_dim, model.dtype) == (4096, 128, "bfloat16")


def test_a_bad_config_gets_inline_errors_and_fills_nothing(login, operator_a):
    url = reverse("web:catalog-create", args=["alpha", "models"])
    response = login(operator_a).post(url, {**MODEL_FIELDS, "hf_config": '{"hidden_size": 4096}', "fill": "1"})
    assert response.status_code == 422
    errors = response.context["form"].errors["hf_config"]
    assert "num_hidden_layers: missing" in errors and "max_position_embeddings: missing" in errors
    broken = login(operator_a).post(url, {**MODEL_FIELDS, "hf_config": "{nope", "fill": "1"})
    assert broken.context["form"].errors["hf_config"][0].startswith("Not a config.json: not valid JSON")


def test_the_model_rules_apply_in_the_portal(login, operator_a, catalog_a):
    url = reverse("web:catalog-create", args=["alpha", "models"])
    data = {**MODEL_FIELDS, "name": "alpha-model", "parameters_billions": 1, "layers": 2, "hidden_size": 64,
            "attention_heads": 6, "kv_heads": 4, "head_dim": 16, "max_context": 4096, "dtype": "bfloat16"}
    response = login(operator_a).post(url, data)
    assert response.status_code == 422
    form = response.context["form"]
    assert "already used in tenant alpha" in form.errors["name"][0]
    assert form.errors["kv_heads"] == ["KV heads (4) must divide attention heads (6)."]


def test_gpus_by_type_and_gpu_hours_of_a_tenant(tenant_a, catalog_a, cluster):
    single = InferenceServiceFactory(tenant=tenant_a, name="one", cluster=cluster, pools=[
        {"role": "engine", "replicas": 2, "max_replicas": 3, "gpus_per_replica": 2, "gpu_type": "l4-24gb"}])
    pd = InferenceServiceFactory(tenant=tenant_a, name="pd", cluster=cluster, deployment_mode="pd_disaggregated",
                                 pools=[{"role": "prefill", "replicas": 1, "max_replicas": 1, "gpus_per_replica": 1},
                                        {"role": "decode", "replicas": 1, "max_replicas": 2, "gpus_per_replica": 4}])
    single.pools.update(ready_replicas=2)
    now = timezone.now().replace(second=0, microsecond=0)

    def minutes(service, role, count, ready, start_ago):
        for i in range(count):
            SeriesPoint.objects.create(service=service, role=role, resolution=Resolution.MINUTE,
                                       time=now - timedelta(minutes=start_ago - i), ready_replicas=ready)

    minutes(single, "", 30, 2, 60)  # 30 minutes x 2 replicas x 2 GPUs = 120 GPU-minutes
    minutes(single, "", 60, 1, 3 * 24 * 60)  # three days ago: 60 x 1 x 2 = 120 GPU-minutes
    minutes(pd, "prefill", 60, 1, 120)  # 60 x 1 x 1 = 60
    minutes(pd, "decode", 60, 2, 120)  # 60 x 2 x 4 = 480
    minutes(pd, "", 60, 3, 120)  # the whole-service rows of a multi-pool service are not counted again
    SeriesPoint.objects.create(service=single, role="", resolution=Resolution.RAW, time=now, ready_replicas=9)

    assert gpu_hours(tenant_a.pk, now - timedelta(hours=24)) == (120 + 60 + 480) / 60
    assert gpu_hours(tenant_a.pk, now - timedelta(days=7)) == (120 + 120 + 60 + 480) / 60
    rows = {r["gpu_type"]: (r["at_max"], r["ready"]) for r in gpus_by_type(tenant_a.pk)}
    assert rows == {"l4-24gb": (6, 4), "h100-sxm-80gb": (1 + 8, 0)}


def test_the_overview_shows_quota_and_gpu_hours(login, viewer_a, tenant_a, service_a):
    html = login(viewer_a).get(reverse("web:overview", args=["alpha"])).content.decode()
    assert '<div class="stat" id="quota-used">4 / 64</div>' in html  # the factory pool: max 4 x 1 GPU
    assert '<div class="stat" id="gpu-hours-day">0.0</div>' in html


def test_the_capacity_slot_answers_as_the_form_changes(login, operator_a, catalog_a, cluster, tenant_a):
    from tests.factories import ModelFactory
    from tests.web.portal.forms import service_post

    url = reverse("web:service-form-parts", args=["alpha"])
    data = service_post(model=catalog_a["model"], runtime=catalog_a["runtime"])
    response = login(operator_a).post(url, data, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="capacity"' in html and 'hx-swap-oob="true"' in html
    row = response.context["capacity"]["rows"][0]
    # Llama 3.1 8B in bf16: K and V x 32 layers x 8 KV heads x 128 dims x 2 bytes per token.
    assert row["role"] == "engine" and row["fits"] is True
    assert row["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 2

    # A 70.6 B model in bf16 is 141.2 GB of weights: more than 90 % of an H100's or an H200's memory at TP 1.
    # 90 % of an MI300X's 192 GB leaves 31.6 GB, enough for one 8,192-token sequence at 2 x 80 layers x 8 KV
    # heads x 128 dims x 2 bytes = 327,680 bytes a token (2.7 GB), not for the model's full 131,072 (42.9 GB).
    big = ModelFactory(name="big", tenant=tenant_a, parameters_billions=70.6, layers=80, hidden_size=8192,
                       attention_heads=64, kv_heads=8, head_dim=128)
    response = login(operator_a).post(url, {**data, "model": big.pk, "max_model_len": 8192}, HTTP_HX_REQUEST="true")
    row = response.context["capacity"]["rows"][0]
    assert row["fits"] is False and "weights need" in row["reason"]
    assert "AMD Instinct MI300X 192GB" in row["fits_on"]
    assert "NVIDIA H200 141GB" not in row["fits_on"] and "NVIDIA H100 SXM 80GB" not in row["fits_on"]
    assert "Suggestion: with these settings it fits on" in response.content.decode()


def test_the_capacity_slot_judges_each_pool_at_the_tensor_parallelism_its_gpus_give(login, operator_a, catalog_a,
                                                                                    cluster, tenant_a):
    from tests.factories import ModelFactory
    from tests.web.portal.forms import service_post

    # Llama 3.1 70B in bf16: 141.2 GB of weights; over 4 H100s that is 35.3 GB a GPU, well inside 80 GB.
    big = ModelFactory(name="big", tenant=tenant_a, parameters_billions=70.6, layers=80, hidden_size=8192,
                       attention_heads=64, kv_heads=8, head_dim=128)
    url = reverse("web:service-form-parts", args=["alpha"])
    four = {"engine": {"gpus_per_replica": 4, "gpu_type": "h100-sxm-80gb"}}
    data = service_post(model=big, runtime=catalog_a["runtime"], pools=four, tensor_parallel_size="",
                        max_model_len=8192)
    response = login(operator_a).post(url, data, HTTP_HX_REQUEST="true")
    row = response.context["capacity"]["rows"][0]
    assert (row["tp"], row["fits"]) == (4, True)  # TP unset + 4 GPUs: judged at TP 4, as admission does
    assert "(TP 4)" in response.content.decode()

    # TP 3 on 4 GPUs would leave one idle (4 is not a multiple of 3): refused naming the setting, as on save.
    response = login(operator_a).post(url, {**data, "tensor_parallel_size": 3}, HTTP_HX_REQUEST="true")
    row = response.context["capacity"]["rows"][0]
    assert row["fits"] is False
    assert row["reason"].startswith("tensor_parallel_size: tensor_parallel_size 3 × pipeline_parallel_size 1 uses 3")
