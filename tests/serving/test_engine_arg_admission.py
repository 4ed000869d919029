"""The engine-argument policy through the API: tenants are refused, older services are flagged, not broken."""

from __future__ import annotations

import pytest

from apps.serving.models import InferenceService
from enginevocab.bounds import MAX_NUM_SEQS
from tests.serving.test_capacity_admission import body, catalog, post  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def test_a_tenant_may_not_ask_for_remote_code(post, catalog):  # noqa: F811
    response = post(body(catalog, gpu_type="h100-sxm-80gb", max_model_len=8192,
                         extra_args=["--trust-remote-code"]))
    assert response.status_code == 400
    assert response.json()["engine_settings"] == [
        "extra_args: --trust-remote-code is platform-only (it runs the model repository's own Python code); "
        "ask staff for a Runtime that sets it"]
    assert not InferenceService.objects.exists()


def test_a_service_saved_before_the_policy_is_flagged_and_stays_editable(post, catalog, api):  # noqa: F811
    response = post(body(catalog, gpu_type="h100-sxm-80gb", max_model_len=8192, extra_args=["--seed", "1"]))
    assert response.status_code == 201, response.content
    # What an older release accepted and stored, written as it was written then (no validation).
    old = {"max_model_len": 8192, "extra_args": ["--served-model=x", "--seed", "1"]}
    InferenceService.objects.filter(pk=response.json()["id"]).update(engine_settings=old)
    client = api("owner_a")
    url = f"/api/v1/services/{response.json()['id']}/"
    shown = client.get(url).json()
    assert shown["warnings"] == [
        "Engine arguments now refused: --served-model (--served-model-name) is set by the control plane"]
    edited = client.patch(url, {"routing_policy": "prefix_aware"}, format="json")
    assert edited.status_code == 200, edited.content
    changed = client.patch(url, {"engine_settings": {**old, "extra_args": ["--served-model=y"]}}, format="json")
    assert changed.status_code == 400
    assert "--served-model (--served-model-name) is set by the control plane" in changed.json()["engine_settings"][0]


_PLATFORM = "is platform-only"
_COMPILE_KEYS = ("(allowed keys: compile_sizes, cudagraph_capture_sizes, cudagraph_mode, cudagraph_num_of_warmups, "
                 "max_cudagraph_capture_size, mode, use_inductor_graph_partition)")


@pytest.mark.parametrize("extra_args,reason", [
    # The flags a deny-list let through, each now outside the allow-list or its bound.
    (["--compilation-config", '{"inductor_passes": {"x": "os.system"}}'],
     f"--compilation-config may not set 'inductor_passes' {_COMPILE_KEYS}"),
    (["-cc", '{"debug_dump_path": "/tmp/d"}'],
     f"-cc (--compilation-config) may not set 'debug_dump_path' {_COMPILE_KEYS}"),
    (["--compilation", '{"cache_dir": "/root"}'],
     f"--compilation (--compilation-config) may not set 'cache_dir' {_COMPILE_KEYS}"),
    (["-O", '{"mode": 3}'], "-O is not a flag of vllm"),
    (["-O{}"], "-O{} (--optimization-level) must be one of 0, 1, 2, 3"),
    (["--compilation-config.inductor_passes", "x"],
     "--compilation-config.inductor_passes sets one key of --compilation-config: pass --compilation-config as one "
     "JSON object instead"),
    (["--tokenizer", "/etc"], f"--tokenizer {_PLATFORM} (it reads a file or path inside the pod)"),
    (["--generation-config", "/root"], "--generation-config must be one of auto, vllm"),
    (["--hf-overrides", "{}"], f"--hf-overrides {_PLATFORM} (it overrides the model's configuration"),
    (["--load-format", "tensorizer"], "--load-format must be one of auto, safetensors, dummy, gguf"),
    (["--load-format=runai_streamer"], "--load-format must be one of auto, safetensors, dummy, gguf"),
    (["--otlp-traces-endpoint", "http://attacker:4317"], f"--otlp-traces-endpoint {_PLATFORM} (it sends traces"),
    (["--uvicorn-log-level", "trace"], "--uvicorn-log-level must be one of critical, error, warning, info"),
    (["--enable-log-outputs"], f"--enable-log-outputs {_PLATFORM} (it writes prompts or outputs to the engine's logs)"),
    (["--max-log-len", "100"], f"--max-log-len {_PLATFORM} (it writes prompts or outputs to the engine's logs)"),
    (["--swap-space", "1e9"], "--swap-space is not a flag of vllm"),
    (["--cpu-offload-gb", "1e9"], "--cpu-offload-gb must be between 0 and 8"),
    (["--disable-log-requests"], "--disable-log-requests is not a flag of vllm"),
    (["--grpc"], "--grpc is refused (it serves gRPC instead of the OpenAI HTTP API"),
])
def test_a_tenant_gets_400_naming_the_flag_and_why(post, catalog, extra_args, reason):  # noqa: F811
    response = post(body(catalog, gpu_type="h100-sxm-80gb", max_model_len=8192, extra_args=extra_args))
    assert response.status_code == 400, response.content
    [error] = response.json()["engine_settings"]
    assert error.startswith("extra_args: ") and reason in error
    assert not InferenceService.objects.exists()


def test_a_tenant_may_set_allowed_keys_of_a_json_flag(post, catalog):  # noqa: F811
    response = post(body(catalog, gpu_type="h100-sxm-80gb", max_model_len=8192, extra_args=[
        "--compilation-config", '{"mode": 3, "cudagraph_capture_sizes": [1, 2, 4, 8]}',
        "--override-generation-config", '{"temperature": 0.2}', "--cpu-offload-gb", "8"]))
    assert response.status_code == 201, response.content


def test_max_num_seqs_is_bounded(post, catalog):  # noqa: F811
    response = post(body(catalog, gpu_type="h100-sxm-80gb", max_model_len=8192, max_num_seqs=10**12))
    assert response.status_code == 400
    assert response.json()["engine_settings"] == [f"max_num_seqs: must be between 1 and {MAX_NUM_SEQS}"]
    assert not InferenceService.objects.exists()
