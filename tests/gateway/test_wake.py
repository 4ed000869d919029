"""The gateway's activation wakes a sleeping service: its Waker posts vLLM's wake calls to the engines the
snapshot names (kubesim's simulated vLLM over HTTP), once for all the requests that arrive meanwhile; the
snapshot names a service's engines as sleeping until a prompt was served after the sleep."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import aiohttp
from django.utils import timezone

from apps.gateway.models import Upstream
from apps.gateway.snapshot import build_snapshot
from apps.telemetry.models import SeriesPoint
from gateway.wake import Waker
from kubesim.engines.harness import pod_context, start
from tests.factories import InferenceServiceFactory

ARGS = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096", "--enable-sleep-mode"]


async def _wake_round(level: int):
    ctx = pod_context("vllm/vllm-openai:v0.32.0", ARGS, gpu_key="l4-24gb", env={"VLLM_SERVER_DEV_MODE": "1"},
                      annotations={"kubesim.io/time-scale": "20"})
    engine = await start(ctx)
    try:
        async with aiohttp.ClientSession(base_url=engine.base_url) as s:
            async with s.post("/sleep", params={"level": str(level)}) as r:
                assert r.status == 200
            address = engine.base_url.removeprefix("http://")
            service = {"id": 1, "sleeping": {"level": level, "since": "t0", "engines": [address]}}
            waker = Waker()
            await asyncio.gather(*(waker.wake_if_asleep(service) for _ in range(3)))
            async with s.get("/is_sleeping") as r:
                asleep = (await r.json())["is_sleeping"]
            return asleep, waker.woken, engine.weights_stale
    finally:
        await engine.stop()


def test_three_requests_wake_a_level_1_engine_once():
    assert asyncio.run(_wake_round(1)) == (False, 1, False)


def test_a_level_2_engine_is_woken_with_its_weights_reloaded():
    assert asyncio.run(_wake_round(2)) == (False, 1, False)


def test_a_released_sglang_engine_is_resumed_once_for_all_requests():
    async def wake_round():
        args = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--context-length", "4096",
                "--enable-memory-saver", "--enable-weights-cpu-backup"]
        ctx = pod_context("lmsysorg/sglang:v0.5.23", args, command=["python3", "-m", "sglang.launch_server"],
                          gpu_key="l4-24gb", annotations={"kubesim.io/time-scale": "20"})
        engine = await start(ctx)
        try:
            async with aiohttp.ClientSession(base_url=engine.base_url) as s:
                async with s.post("/release_memory_occupation", json={}) as r:
                    assert r.status == 200
                released = engine.paused
                address = engine.base_url.removeprefix("http://")
                service = {"id": 1, "sleeping": {"level": 1, "engine": "sglang", "since": "t0", "engines": [address]}}
                waker = Waker()
                await asyncio.gather(*(waker.wake_if_asleep(service) for _ in range(3)))
                return released, engine.paused, waker.woken
        finally:
            await engine.stop()

    assert asyncio.run(wake_round()) == (True, False, 1)


def test_the_snapshot_names_the_sleeping_engines_until_a_prompt_is_served(db, tenant_a):
    service = InferenceServiceFactory(tenant=tenant_a)
    slept = timezone.now() - timedelta(minutes=5)
    Upstream.objects.create(service=service, routed=True, ready_engines=1, seen_at=timezone.now(),
                            endpoints=[{"pod": "r-0", "address": "10.0.0.9:8000"}],
                            engines=[{"pod": "e-0", "address": "10.0.0.7:8000"}], sleep_level=2, slept_at=slept)

    def entry():
        return next(s for s in build_snapshot()["services"] if s["id"] == service.pk)["sleeping"]

    assert entry() == {"level": 2, "since": slept.isoformat(), "engine": "vllm", "engines": ["10.0.0.7:8000"]}
    SeriesPoint.objects.create(service=service, role="", time=slept - timedelta(seconds=1), prompt_tps=10)
    assert entry() is not None  # traffic before the sleep does not wake it
    SeriesPoint.objects.create(service=service, role="", time=slept + timedelta(seconds=30), prompt_tps=10)
    assert entry() is None
