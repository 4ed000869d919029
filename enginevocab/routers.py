"""The request routers' command lines: the vLLM production-stack router (`vllm-router`) and the SGLang router
(`python -m sglang_router.launch_router`).

One table per router, in the shape of `vllm.FLAGS` ((flags, kind, default)); the renderer
(apps/serving/rendering/routers.py) writes its arguments with these names and choices, and kubesim's simulated
routers (kubesim/engines/router.py) build their parsers from the same tables, so a flag or choice the renderer
writes and the simulation lacks fails a test rather than a pod.
"""

from __future__ import annotations

from enginevocab.values import ANY, APPEND, APPEND_LIST, FLOAT, INT, STR, SWITCH

PSTACK_PROG = "vllm-router"
SGLANG_PROG = "launch_router.py"

# vllm-router --routing-logic (production-stack src/vllm_router/parsers/parser.py).
PSTACK_ROUTING_LOGICS = ("roundrobin", "session", "prefixaware", "kvaware", "disaggregated_prefill",
                         "disaggregated_prefill_orchestrated")
PSTACK_SERVICE_DISCOVERY = ("static", "k8s")
# The SGLang router's --policy (and --prefill-policy / --decode-policy).
SGLANG_POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")
SGLANG_METRICS_PORT = 29000

PSTACK_FLAGS: list[tuple[tuple[str, ...], object, object]] = [
    (("--host",), STR, "0.0.0.0"),
    (("--port",), INT, 8001),
    (("--service-discovery",), PSTACK_SERVICE_DISCOVERY, "static"),
    (("--static-backends",), STR, None),
    (("--static-models",), STR, None),
    (("--static-model-labels",), STR, None),
    (("--static-model-types",), STR, None),
    (("--static-aliases",), STR, None),
    (("--static-backend-health-checks",), SWITCH, False),
    (("--k8s-port",), INT, 8000),
    (("--k8s-namespace",), STR, "default"),
    (("--k8s-label-selector",), STR, ""),
    (("--k8s-service-discovery-type",), ("pod-ip", "service-name"), "pod-ip"),
    (("--routing-logic",), PSTACK_ROUTING_LOGICS, "roundrobin"),
    (("--session-key",), STR, None),
    (("--lmcache-controller-port",), INT, 9000),
    (("--prefill-model-labels",), STR, None),
    (("--decode-model-labels",), STR, None),
    (("--engine-stats-interval",), INT, 30),
    (("--request-stats-window",), INT, 60),
    (("--log-stats",), SWITCH, False),
    (("--log-stats-interval",), INT, 10),
    (("--log-level",), STR, "info"),
    (("--dynamic-config-yaml",), STR, None),
    (("--dynamic-config-json",), STR, None),
    (("--callbacks",), STR, None),
    (("--max-instance-failover-reroute-attempts",), INT, 0),
    (("--enable-batch-api",), SWITCH, False),
    (("--file-storage-class",), STR, "local_file"),
    (("--file-storage-path",), STR, "/tmp/vllm_files"),  # noqa: S108 (the router's default)
    (("--batch-processor",), STR, "local"),
    (("--sentry-dsn",), STR, None),
    (("--api-key",), STR, None),
]

SGLANG_ROUTER_FLAGS: list[tuple[tuple[str, ...], object, object]] = [
    (("--host",), STR, "127.0.0.1"),
    (("--port",), INT, 30000),
    (("--worker-urls",), ANY, []),
    (("--policy",), SGLANG_POLICIES, "cache_aware"),
    (("--prefill-policy",), SGLANG_POLICIES, None),
    (("--decode-policy",), SGLANG_POLICIES, None),
    (("--pd-disaggregation",), SWITCH, False),
    (("--prefill",), APPEND_LIST, []),  # URL [bootstrap port], once per prefill server
    (("--decode",), APPEND, []),
    (("--service-discovery",), SWITCH, False),
    (("--selector",), ANY, []),
    (("--prefill-selector",), ANY, []),
    (("--decode-selector",), ANY, []),
    (("--service-discovery-port",), INT, 80),
    (("--service-discovery-namespace",), STR, None),
    (("--cache-threshold",), FLOAT, 0.3),
    (("--balance-abs-threshold",), INT, 64),
    (("--balance-rel-threshold",), FLOAT, 1.5),
    (("--eviction-interval-secs",), INT, 120),
    (("--max-tree-size",), INT, 2**26),
    (("--max-payload-size",), INT, 512 * 1024 * 1024),
    (("--prometheus-port",), INT, SGLANG_METRICS_PORT),
    (("--prometheus-host",), STR, "127.0.0.1"),
    (("--request-timeout-secs",), INT, 1800),
    (("--max-concurrent-requests",), INT, -1),
    (("--log-level",), STR, "info"),
    (("--log-dir",), STR, None),
    (("--dp-aware",), SWITCH, False),
    (("--api-key",), STR, None),
    (("--model-path",), STR, None),
    (("--tokenizer-path",), STR, None),
    (("--disable-retries",), SWITCH, False),
    (("--disable-circuit-breaker",), SWITCH, False),
    (("--retry-max-retries",), INT, 5),
    (("--health-check-interval-secs",), INT, 60),
    (("--request-id-headers",), ANY, None),
]
