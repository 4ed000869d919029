"""Engine detection, command-line parsing in the forms people write, errors, endpoints and LoRA."""

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from enginevocab import vllm as vllm_vocab
from enginevocab.versions import Span
from kubesim.engines import engine_kind, workload_for
from kubesim.engines.flags import image_version, parse_vllm
from kubesim.engines.harness import pod_context, start
from kubesim.engines.server import EngineWorkload
from kubesim.workload import WorkloadExit

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VLLM = "vllm/vllm-openai:v0.33.0"
SGLANG = "lmsysorg/sglang:v0.5.2-cu126"
FAST = {"kubesim.io/time-scale": "20"}


def start_error(ctx) -> WorkloadExit:
    w = workload_for(ctx)
    with pytest.raises(WorkloadExit) as info:
        asyncio.run(w.start())
    return info.value


def test_images_are_recognised_by_repository_not_tag():
    assert engine_kind({"image": "vllm/vllm-openai:latest"}) == "vllm"
    assert engine_kind({"image": "docker.io/vllm/vllm-openai@sha256:abc"}) == "vllm"
    assert engine_kind({"image": "lmsysorg/sglang:dev"}) == "sglang"
    assert (
        engine_kind({"image": "lmsysorg/sglang:latest", "command": ["python3", "-m", "sglang_router.launch_router"]})
        == "sglang-router"
    )
    assert engine_kind({"image": "lmcache/lmstack-router:latest"}) == "pstack-router"
    assert engine_kind({"image": "nginx:1.27"}) is None
    assert workload_for(pod_context("busybox:1.36", ["sleep", "1"])) is None


@pytest.mark.parametrize(
    ("command", "args"),
    [
        (None, [LLAMA, "--max-model-len", "4k"]),
        (["vllm", "serve"], [LLAMA, "--max_model_len=4096"]),
        (["python3", "-m", "vllm.entrypoints.openai.api_server"], ["--model", LLAMA, "--max-model-len", "4096"]),
        (["/bin/sh", "-c"], [f"exec vllm serve {LLAMA} --max-model-len 4096 --port 8000"]),
    ],
)
def test_vllm_command_forms_serve_the_model(command, args):
    async def go():
        w = await start(pod_context(VLLM, args, command=command, annotations=FAST))
        try:
            async with aiohttp.ClientSession() as s, s.get(w.base_url + "/v1/models") as r:
                return (await r.json())["data"][0]
        finally:
            await w.stop()

    card = asyncio.run(go())
    assert card["id"] == LLAMA
    # "4k" means 4000 to vLLM; the other forms say 4096.
    assert card["max_model_len"] in (4000, 4096)


def test_misspelled_vllm_flag_exits_with_argparse_message():
    err = start_error(pod_context(VLLM, [LLAMA, "--max-num-seqz", "64"]))
    assert "vllm serve: error: unrecognized arguments: --max-num-seqz" in err.message
    assert err.exit_code == 2
    assert any(line.startswith("usage: vllm serve") for line in err.logs)


def test_bad_vllm_value_exits_with_argparse_message():
    err = start_error(pod_context(VLLM, [LLAMA, "--gpu-memory-utilization", "lots"]))
    # As vLLM 0.32's parser says it: the argument named by all its spellings.
    assert err.message == ("vllm serve: error: argument --gpu-memory-utilization/--device-memory-utilization: "
                           "invalid float value: 'lots'")


def test_vllm_refuses_a_context_that_does_not_fit_the_kv_cache():
    # Llama-3.1-8B on an L4: 24 GiB x 0.92 leaves about 5 GiB of KV, far less than 131072 tokens need.
    err = start_error(pod_context(VLLM, [LLAMA], gpu_key="l4-24gb"))
    assert "To serve at least one request with the models's max seq len (131072)" in err.message


def test_vllm_needs_as_many_gpus_as_tensor_parallel_ranks():
    err = start_error(pod_context(VLLM, [LLAMA, "--tensor-parallel-size", "4"], gpu_count=2))
    assert "exceeds the total number of available GPUs" in err.message


def test_misspelled_sglang_flag_exits_with_argparse_message():
    cmd = ["python3", "-m", "sglang.launch_server"]
    err = start_error(pod_context(SGLANG, ["--model-path", LLAMA, "--tp-szie", "2"], command=cmd))
    assert err.message == "launch_server.py: error: unrecognized arguments: --tp-szie 2"
    err = start_error(pod_context(SGLANG, ["--port", "30000"], command=cmd))
    assert "the following arguments are required: --model-path/--model" in err.message


def test_sglang_serve_form_health_ready_and_models():
    async def go():
        ctx = pod_context(
            SGLANG,
            [
                "sglang",
                "serve",
                "--model-path",
                LLAMA,
                "--served-model-name",
                "llama",
                "--host",
                "0.0.0.0",
                "--context-length",
                "8192",
            ],
            annotations=FAST,
        )
        w = await start(ctx)
        try:
            async with aiohttp.ClientSession() as s:
                out = {}
                for path in ("/health", "/ready", "/v1/models", "/server_info"):
                    async with s.get(w.base_url + path) as r:
                        out[path] = (r.status, await r.json() if "json" in r.content_type else None)
                body = {"model": "nope", "prompt": "x", "max_tokens": 2}
                async with s.post(w.base_url + "/v1/completions", json=body) as r:
                    out["wrong-model"] = r.status
                return out
        finally:
            await w.stop()

    out = asyncio.run(go())
    assert out["/health"][0] == 200 and out["/ready"][0] == 200
    assert out["/v1/models"][1]["data"][0]["id"] == "llama"
    assert out["/server_info"][1]["context_length"] == 8192
    assert out["wrong-model"] == 404


def test_engine_reports_unavailable_until_the_model_is_loaded():
    async def go():
        w = workload_for(pod_context(VLLM, [LLAMA], fast_start=False))
        # 16 GB of weights read from the cluster cache at 2 GB/s, loaded over the H100's PCIe 5.0 link at 80 % of
        # 63 GB/s, plus 20 s of init.
        assert w.startup_seconds() == pytest.approx(8.03e9 * 2 / 2e9 + 8.03e9 * 2 / 50.4e9 + 20)
        await w.start()
        try:
            async with aiohttp.ClientSession() as s, s.get(w.base_url + "/health") as r:
                return r.status
        finally:
            await w.stop()

    assert asyncio.run(go()) == 503


def test_vllm_runtime_lora_needs_the_env_flag_and_enable_lora():
    async def go(env, extra):
        w = await start(pod_context(VLLM, [LLAMA, "--max-model-len", "4096", *extra], env=env, annotations=FAST))
        try:
            async with aiohttp.ClientSession() as s:
                load = {"lora_name": "sql", "lora_path": "/adapters/sql"}
                async with s.post(w.base_url + "/v1/load_lora_adapter", json=load) as r:
                    status = r.status
                async with s.get(w.base_url + "/v1/models") as r:
                    ids = [c["id"] for c in (await r.json())["data"]]
                if status == 200:
                    body = {"model": "sql", "prompt": "select", "max_tokens": 200, "ignore_eos": True}
                    task = asyncio.create_task(s.post(w.base_url + "/v1/completions", json=body))
                    while not w.core.running:
                        await asyncio.sleep(0.005)
                    async with s.get(w.base_url + "/metrics") as r:
                        info = (
                            next(
                                f
                                for f in text_string_to_metric_families(await r.text())
                                if f.name == "vllm:lora_requests_info"
                            )
                            .samples[0]
                            .labels
                        )
                    assert info == {"max_lora": "1", "running_lora_adapters": "sql", "waiting_lora_adapters": ""}
                    response = await task
                    assert response.status == 200
                    response.release()
                    async with s.post(w.base_url + "/v1/unload_lora_adapter", json={"lora_name": "sql"}) as r:
                        assert r.status == 200
                return status, ids
        finally:
            await w.stop()

    assert asyncio.run(go({}, ["--enable-lora"]))[0] == 404
    assert asyncio.run(go({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}, []))[0] == 404
    status, ids = asyncio.run(go({"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}, ["--enable-lora"]))
    assert status == 200 and ids == [LLAMA, "sql"]


def test_sglang_lora_load_needs_enable_lora():
    async def go(extra):
        cmd = ["python3", "-m", "sglang.launch_server"]
        w = await start(
            pod_context(
                SGLANG, ["--model-path", LLAMA, "--context-length", "4096", *extra], command=cmd, annotations=FAST
            )
        )
        try:
            async with aiohttp.ClientSession() as s:
                load = {"lora_name": "sql", "lora_path": "/adapters/sql"}
                async with s.post(w.base_url + "/load_lora_adapter", json=load) as r:
                    return r.status
        finally:
            await w.stop()

    assert asyncio.run(go([])) == 400
    assert asyncio.run(go(["--enable-lora", "--max-lora-rank", "16", "--lora-target-modules", "all"])) == 200


def test_context_overflow_is_rejected_with_the_engines_message():
    async def go():
        w = await start(pod_context(VLLM, [LLAMA, "--max-model-len", "100"], annotations=FAST))
        try:
            async with aiohttp.ClientSession() as s:
                body = {"prompt": " ".join(["w"] * 90), "max_tokens": 20}
                async with s.post(w.base_url + "/v1/completions", json=body) as r:
                    return r.status, await r.json()
        finally:
            await w.stop()

    status, body = asyncio.run(go())
    assert status == 400
    assert body["error"]["message"].startswith(
        "This model's maximum context length is 100 tokens. However, you requested 110 tokens (90 in the "
        "messages, 20 in the completion)."
    )


def test_multi_node_vllm_leader_counts_only_its_own_gpus():
    # TP 16 over two 8-GPU pods, as a LeaderWorkerSet renders it.
    args = [
        "--model",
        LLAMA,
        "--tensor-parallel-size",
        "16",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--master-addr",
        "llama-0.llama",
        "--master-port",
        "29500",
        "--max-model-len",
        "8192",
    ]

    async def go():
        w = await start(pod_context(VLLM, args, command=["vllm", "serve"], gpu_count=8, annotations=FAST))
        try:
            return w.spec.core.kv_bytes_per_token_rank
        finally:
            await w.stop()

    # 8 KV heads over 16 ranks: each rank keeps one head (replicated), 32 layers x 128 dims x K and V x 2 bytes.
    assert asyncio.run(go()) == 2 * 32 * 1 * 128 * 2


def test_sglang_native_generate_endpoint():
    async def go():
        cmd = ["python3", "-m", "sglang.launch_server"]
        w = await start(
            pod_context(SGLANG, ["--model-path", LLAMA, "--context-length", "4096"], command=cmd, annotations=FAST)
        )
        try:
            async with aiohttp.ClientSession() as s:
                body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4}}
                async with s.post(w.base_url + "/generate", json=body) as r:
                    plain = await r.json()
                async with s.post(w.base_url + "/generate", json={**body, "stream": True}) as r:
                    lines = [ln for ln in (await r.text()).splitlines() if ln.startswith("data: ")]
            return plain, lines
        finally:
            await w.stop()

    plain, lines = asyncio.run(go())
    # "The", " capita", "l" (seven letters split after six), " of", " France", " is"
    assert plain["meta_info"]["prompt_tokens"] == 6 and plain["meta_info"]["completion_tokens"] == 4
    assert plain["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    assert len(plain["text"].split()) == 4
    assert len(lines) == 4 + 1 and lines[-1] == "data: [DONE]"


def test_outputs_are_reproducible_for_a_seed():
    async def texts(seed):
        w = await start(pod_context(VLLM, [LLAMA, "--max-model-len", "4096", "--seed", str(seed)], annotations=FAST))
        try:
            async with aiohttp.ClientSession() as s:
                out = []
                for i in range(3):
                    body = {"prompt": f"tell me a story {i}", "max_tokens": 300}
                    async with s.post(w.base_url + "/v1/completions", json=body) as r:
                        choice = (await r.json())["choices"][0]
                        out.append((choice["text"], choice["finish_reason"]))
                return out
        finally:
            await w.stop()

    first, again, other = asyncio.run(texts(5)), asyncio.run(texts(5)), asyncio.run(texts(6))
    assert first == again
    assert first != other
    # Without ignore_eos the length is a seeded draw, so some requests stop before max_tokens.
    assert {reason for _, reason in first + other} <= {"stop", "length"}


def test_model_architecture_from_path_served_name_or_annotation():
    async def per_token(args, annotations=None):
        w = await start(pod_context(VLLM, args, annotations={**FAST, **(annotations or {})}))
        try:
            return w.spec.core.kv_bytes_per_token_rank, w.spec.core.max_model_len
        finally:
            await w.stop()

    # Qwen2.5-7B: 28 layers x 4 KV heads x 128 dims x K,V x 2 bytes, 32768 context.
    qwen = (2 * 28 * 4 * 128 * 2, 32768)
    assert asyncio.run(per_token(["/models/Qwen2.5-7B-Instruct"])) == qwen
    assert asyncio.run(per_token(["/mnt/models", "--served-model-name", "Qwen/Qwen2.5-7B-Instruct"])) == qwen
    arch = (
        '{"params_b": 1.0, "layers": 16, "hidden": 2048, "heads": 32, "kv_heads": 8, "head_dim": 64, '
        '"max_context": 4096}'
    )
    assert asyncio.run(per_token(["my-org/tiny"], {"kubesim.io/model-arch": arch})) == (2 * 16 * 8 * 64 * 2, 4096)


def test_the_engine_of_an_image_tags_version_refuses_a_flag_that_version_lacks(monkeypatch):
    # reference/engines.md documents one vLLM version, so the shipped spans are empty; record one as a fact would.
    monkeypatch.setitem(vllm_vocab.SPANS, "--enable-mfu-metrics", Span(since="0.31.0"))
    monkeypatch.setitem(vllm_vocab.SPANS, "--max-num-queued-reqs", Span(since="0.31.0"))
    old = "vllm/vllm-openai:v0.30.2"
    err = start_error(pod_context(old, [LLAMA, "--max-model-len", "8192", "--enable-mfu-metrics"]))
    assert err.message == "vllm serve: error: unrecognized arguments: --enable-mfu-metrics"
    # A flag the version lacks keeps the default the simulation reads.
    ns, _ = parse_vllm([LLAMA], version="0.30.2")
    assert ns.max_num_queued_reqs is None
    current = workload_for(pod_context(VLLM, [LLAMA, "--max-model-len", "8192", "--enable-mfu-metrics"]))
    assert isinstance(current, EngineWorkload)  # v0.33.0 has it
    assert image_version("registry.local:5000/vllm/vllm-openai:v0.30.2-cu128") == "0.30.2"
    assert image_version("vllm/vllm-openai@sha256:" + "0" * 64) is None
