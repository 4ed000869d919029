"""Routing policies and the simulated routers (production-stack and SGLang)."""

import asyncio
import contextlib

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from kubesim.engines.harness import StaticCluster, pod_context, start
from kubesim.engines.routing import RequestInfo, RoutingState, chunk_hashes, pick
from kubesim.workload import Endpoint
from tests.kubesim.cluster_support import sglang_argv

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
VLLM = "vllm/vllm-openai:v0.33.0"
FAST = {"kubesim.io/time-scale": "10"}

EPS = [Endpoint(f"pod-{i}", f"http://10.0.0.{i}:8000") for i in range(3)]


def info(prompt="", **headers):
    return RequestInfo(headers=headers, prompt=prompt)


def test_round_robin_cycles_through_endpoints():
    st = RoutingState("roundrobin")
    picks = [st.pick(info(), EPS).pod_name for _ in range(6)]
    assert picks == ["pod-0", "pod-1", "pod-2", "pod-0", "pod-1", "pod-2"]


def test_session_affinity_keeps_a_session_on_one_endpoint_and_spreads_sessions():
    st = RoutingState("session", session_key="x-user-id")
    for user in ("ann", "bob", "cid", "dan"):
        first = st.pick(info(**{"x-user-id": user}), EPS)
        assert all(st.pick(info(**{"x-user-id": user}), EPS) == first for _ in range(5))
    spread = {st.pick(info(**{"x-user-id": f"u{i}"}), EPS).pod_name for i in range(30)}
    assert spread == {"pod-0", "pod-1", "pod-2"}
    # Removing another endpoint does not move a session (consistent hashing).
    home = st.pick(info(**{"x-user-id": "ann"}), EPS)
    rest = [e for e in EPS if e != home]
    assert st.pick(info(**{"x-user-id": "ann"}), [home, rest[0]]) == home


def test_prefix_aware_sends_a_shared_prefix_to_the_endpoint_that_saw_it():
    st = RoutingState("prefixaware")
    system = "You are a careful assistant. " * 20  # 580 characters: four full 128-char chunks
    first = st.pick(info(system + "question one"), EPS)
    for q in ("two", "three", "four"):
        st.done(first)
        assert st.pick(info(system + "question " + q), EPS) == first
    assert st.prefix_match_ratio() > 0.5
    assert len(chunk_hashes(system + "question one")) == 5


def test_prefix_aware_yields_to_load_balance_when_imbalanced():
    st = RoutingState("cache_aware", balance_abs_threshold=4, balance_rel_threshold=1.5)
    system = "x" * 1000
    home = st.pick(info(system), EPS)
    for _ in range(10):  # ten requests in flight on `home`, none elsewhere: imbalanced
        st.in_flight[home.base_url] += 1
    assert st.pick(info(system), EPS) != home


def test_module_level_pick_keeps_state_per_policy_and_service():
    a = [pick("round_robin", RequestInfo(service="ns/a"), EPS).pod_name for _ in range(3)]
    assert a == ["pod-0", "pod-1", "pod-2"]
    assert pick("round_robin", RequestInfo(service="ns/b"), EPS).pod_name == "pod-0"


def _p95(values):
    values = sorted(values)
    return values[int(0.95 * (len(values) - 1))]


async def _shared_prefix_run(routing_logic: str):
    engines = [
        await start(
            pod_context(
                VLLM, [LLAMA, "--max-model-len", "8192"], annotations=FAST, name=f"e{i}", labels={"app": "llama"}
            )
        )
        for i in range(2)
    ]
    eps = [Endpoint(f"e{i}", w.base_url, {"app": "llama"}) for i, w in enumerate(engines)]
    args = ["--service-discovery", "k8s", "--k8s-label-selector", "app=llama", "--routing-logic", routing_logic]
    router = await start(pod_context("lmcache/lmstack-router:latest", args, cluster=StaticCluster(eps)))
    ttfts = []
    try:
        async with aiohttp.ClientSession() as s:
            for rnd in range(4):
                for tenant in range(5):  # odd, so round robin alternates a tenant's engines
                    prefix = " ".join(f"t{tenant}w{i % 90}" for i in range(3000))
                    body = {"prompt": f"{prefix} round {rnd}", "max_tokens": 2, "ignore_eos": True}
                    async with s.post(router.base_url + "/v1/completions", json=body) as r:
                        assert r.status == 200, await r.text()
            async with s.get(router.base_url + "/metrics") as r:
                router_metrics = await r.text()
            hits = 0.0
            for w in engines:
                async with s.get(w.base_url + "/metrics") as r:
                    for fam in text_string_to_metric_families(await r.text()):
                        if fam.name == "vllm:prefix_cache_hits":
                            hits += fam.samples[0].value
                        if fam.name == "vllm:time_to_first_token_seconds":
                            ttfts.append(sum(x.value for x in fam.samples if x.name.endswith("_sum")))
    finally:
        await router.stop()
        for w in engines:
            await w.stop()
    return hits, sum(ttfts), router_metrics


def test_prefix_aware_routing_beats_round_robin_on_a_shared_prefix_workload():
    pa_hits, pa_ttft, pa_metrics = asyncio.run(_shared_prefix_run("prefixaware"))
    rr_hits, rr_ttft, _ = asyncio.run(_shared_prefix_run("roundrobin"))
    # Each tenant's 3000-token prefix (187 full blocks = 2992 tokens): prefix-aware computes it once and
    # 3 later requests per tenant hit; round robin computes it on both engines and only 2 hit.
    assert pa_hits == 5 * 3 * 2992
    assert rr_hits == 5 * 2 * 2992
    assert pa_ttft < rr_ttft
    fams = {f.name: f for f in text_string_to_metric_families(pa_metrics)}
    served = {s.labels["server"]: s.value for s in fams["router_requests"].samples if s.name.endswith("_total")}
    assert sum(served.values()) == 20
    assert fams["router_prefix_match_ratio"].samples[0].value > 0.5


def sglang_pd_context(mode: str, name: str):
    """An SGLang pod of the given disaggregation mode (prefill or decode) serving LLAMA."""
    argv = sglang_argv(LLAMA, "--disaggregation-mode", mode, "--context-length", "8192", "--enable-metrics")
    return pod_context("lmsysorg/sglang:latest", argv, annotations=FAST, name=name)


def test_sglang_router_streams_and_routes_prefill_to_decode():
    async def go():
        pre = await start(sglang_pd_context("prefill", "p"))
        dec = await start(sglang_pd_context("decode", "d"))
        router = await start(
            pod_context(
                "lmsysorg/sglang-router:v0.2.1",
                [
                    "python3",
                    "-m",
                    "sglang_router.launch_router",
                    "--pd-disaggregation",
                    "--prefill",
                    pre.base_url,
                    "8998",
                    "--decode",
                    dec.base_url,
                    "--host",
                    "0.0.0.0",
                    "--port",
                    "30000",
                ],
            )
        )
        try:
            async with aiohttp.ClientSession() as s:
                body = {"messages": [{"role": "user", "content": "hello " * 50}], "max_tokens": 5, "stream": True}
                async with s.post(router.base_url + "/v1/chat/completions", json=body) as r:
                    assert r.status == 200
                    lines = [ln for ln in (await r.text()).splitlines() if ln.startswith("data: ")]
                engine_types = {}
                for w in (pre, dec):
                    async with s.get(w.base_url + "/metrics") as r:
                        for fam in text_string_to_metric_families(await r.text()):
                            if fam.name == "sglang:generation_tokens":
                                engine_types[fam.samples[0].labels["engine_type"]] = sum(
                                    x.value for x in fam.samples if x.name.endswith("_total")
                                )
                return lines, engine_types
        finally:
            for w in (router, pre, dec):
                await w.stop()

    lines, gen = asyncio.run(go())
    assert lines[-1] == "data: [DONE]"
    # role chunk, five tokens, the finish chunk and [DONE]
    assert len(lines) == 1 + 5 + 1 + 1
    assert gen == {"prefill": 1, "decode": 5}


@contextlib.asynccontextmanager
async def busy_and_idle_engines():
    """Two vLLM engines, `busy` holding a 4000-token request's KV cache; yields them, the client session and
    the busy request's task."""
    args = [LLAMA, "--max-model-len", "8192", "--num-gpu-blocks-override", "2000"]
    busy, idle = [await start(pod_context(VLLM, args, annotations=FAST, name=n)) for n in ("busy", "idle")]
    try:
        async with aiohttp.ClientSession() as s:
            body = {"prompt": " ".join(f"w{i}" for i in range(4000)), "max_tokens": 400, "ignore_eos": True}
            task = asyncio.create_task(s.post(busy.base_url + "/v1/completions", json=body))
            while busy.core.kv_usage() == 0:
                await asyncio.sleep(0.01)
            yield busy, idle, s, task
    finally:
        await busy.stop()
        await idle.stop()


def test_kv_aware_picks_the_engine_with_the_lowest_kv_usage():
    async def go():
        async with busy_and_idle_engines() as (busy, idle, _, task):
            eps = [Endpoint("busy", busy.base_url), Endpoint("idle", idle.base_url)]
            st = RoutingState("kvaware")
            picks = {st.pick(info("anything"), eps).pod_name for _ in range(5)}
            usage = busy.core.kv_usage()
            (await task).release()
        return picks, usage

    picks, usage = asyncio.run(go())
    # 4000 prompt tokens hold 250 of the 1999 usable blocks.
    assert usage >= 250 / 1999
    assert picks == {"idle"}


def test_kvaware_router_reads_kv_usage_from_the_engines_metrics():
    async def go():
        async with busy_and_idle_engines() as (busy, idle, s, task):
            router = await start(
                pod_context(
                    "lmcache/lmstack-router:latest",
                    [
                        "--service-discovery",
                        "static",
                        "--static-backends",
                        f"{busy.base_url},{idle.base_url}",
                        "--routing-logic",
                        "kvaware",
                        "--engine-stats-interval",
                        "1",
                    ],
                )
            )
            try:
                while len(router.state.scraped_kv) < 2:
                    await asyncio.sleep(0.01)
                for _ in range(3):
                    async with s.post(router.base_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}):
                        pass
                async with s.get(router.base_url + "/metrics") as r:
                    text = await r.text()
                (await task).release()
                busy_kv = router.state.scraped_kv[busy.base_url]
            finally:
                await router.stop()
        served = {
            x.labels["server"]: x.value
            for f in text_string_to_metric_families(text)
            if f.name == "router_requests"
            for x in f.samples
            if x.name.endswith("_total")
        }
        return served, busy_kv, idle.base_url

    served, busy_kv, idle_url = asyncio.run(go())
    assert busy_kv >= 250 / 1999
    assert served == {idle_url: 3.0}


async def _running(session, engine) -> float:
    async with session.get(engine.base_url + "/metrics") as r:
        for fam in text_string_to_metric_families(await r.text()):
            if fam.name == "vllm:num_requests_running":
                return fam.samples[0].value
    raise AssertionError("no vllm:num_requests_running")


async def _router_client_leaves():
    engine = await start(pod_context(VLLM, [LLAMA], name="e0", labels={"app": "llama"}))
    eps = [Endpoint("e0", engine.base_url, {"app": "llama"})]
    args = ["--service-discovery", "k8s", "--k8s-label-selector", "app=llama", "--routing-logic", "roundrobin"]
    router = await start(pod_context("lmcache/lmstack-router:latest", args, cluster=StaticCluster(eps)))
    try:
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "tell a long story", "max_tokens": 4000, "ignore_eos": True}  # not streamed
            waiting = asyncio.ensure_future(s.post(router.base_url + "/v1/completions", json=body))
            for _ in range(100):
                if await _running(s, engine) == 1:
                    break
                await asyncio.sleep(0.05)
            running_before = await _running(s, engine)
            waiting.cancel()  # the client leaves before the answer: its connection is closed
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
            for _ in range(100):
                if await _running(s, engine) == 0:
                    break
                await asyncio.sleep(0.05)
            return running_before, await _running(s, engine)
    finally:
        await router.stop()
        await engine.stop()


def test_a_client_that_leaves_the_router_before_a_non_streamed_answer_aborts_the_engines_request():
    assert asyncio.run(_router_client_leaves()) == (1, 0)
