"""SGLang 0.5.23 (`python3 -m sglang.launch_server`): its flags, types, defaults and who may set each.

Booleans are plain switches (no --no- form). A flag missing from these tables is unknown to the
control plane, so a tenant cannot pass it.
"""

from __future__ import annotations

from enginevocab.bounds import MAX_NUM_BATCHED_TOKENS, ListOf, Name, Num, OneOf, Switch
from enginevocab.values import FLOAT as _FLOAT
from enginevocab.values import INT as _INT
from enginevocab.values import STR as _STR
from enginevocab.versions import Span

VERSION = "0.5.23"
# The default runtime: the image and tag the demo seed runs.
IMAGE = "lmsysorg/sglang"
TAG = f"v{VERSION}"
KV_CACHE_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "nvfp4")

FLAGS: list[tuple[tuple[str, ...], object, object]] = [
    (("--model-path", "--model"), _STR, None),
    (("--tokenizer-path",), _STR, None),
    (("--served-model-name",), _STR, None),
    (("--host",), _STR, "127.0.0.1"),
    (("--port",), _INT, 30000),
    (("--tp-size", "--tensor-parallel-size", "--tp"), _INT, 1),
    (("--pp-size", "--pipeline-parallel-size"), _INT, 1),
    (("--dp-size", "--data-parallel-size"), _INT, 1),
    (("--attn-dp-size",), _INT, None),
    (("--ep-size", "--expert-parallel-size"), _INT, 1),
    (("--load-balance-method",), _STR, "auto"),
    (("--context-length",), _INT, None),
    (("--mem-fraction-static",), _FLOAT, None),
    (("--kv-cache-dtype",), KV_CACHE_DTYPES, "auto"),
    (("--page-size",), _INT, None),
    (("--chunked-prefill-size",), _INT, None),
    (("--max-prefill-tokens",), _INT, 16384),
    (("--max-running-requests",), _INT, None),
    (("--max-queued-requests",), _INT, None),
    (("--max-total-tokens",), _INT, None),
    (("--schedule-policy",), ("lpm", "random", "fcfs", "dfs-weight", "lof", "priority"), "fcfs"),
    (("--schedule-conservativeness",), _FLOAT, 1.0),
    (("--lora-paths",), "list", None),
    (("--max-loras-per-batch",), _INT, 8),
    (("--max-loaded-loras",), _INT, None),
    (("--max-lora-rank",), _INT, None),
    (("--lora-target-modules",), "list", None),
    (("--lora-backend",), _STR, "csgmv"),
    (("--quantization",), _STR, None),
    (("--dtype",), _STR, "auto"),
    (("--random-seed",), _INT, None),
    (("--disaggregation-mode",), ("null", "prefill", "decode"), "null"),
    (
        ("--disaggregation-transfer-backend",),
        ("mooncake", "nixl", "mori", "ascend", "mooncake_tcp", "fake"),
        "mooncake",
    ),
    (("--disaggregation-bootstrap-port",), _INT, 8998),
    (("--disaggregation-ib-device",), _STR, None),
    (("--speculative-algorithm",), _STR, None),
    (("--speculative-draft-model-path",), _STR, None),
    (("--speculative-num-steps",), _INT, None),
    (("--speculative-eagle-topk",), _INT, None),
    (("--speculative-num-draft-tokens",), _INT, None),
    (("--download-dir",), _STR, None),
    (("--revision",), _STR, None),
    (("--load-format",), _STR, "auto"),
    (("--chat-template",), _STR, None),
    (("--api-key",), _STR, None),
    (("--log-level",), _STR, "info"),
    (("--log-requests-level",), _INT, 2),
    (("--stream-interval",), _INT, 1),
    (("--watchdog-timeout",), _FLOAT, 300),
    (("--cuda-graph-max-bs",), _INT, None),
    (("--attention-backend",), _STR, None),
    (("--sampling-backend",), _STR, None),
    (("--grammar-backend",), _STR, None),
    (("--reasoning-parser",), _STR, None),
    (("--tool-call-parser",), _STR, None),
    (("--device",), _STR, None),
    (("--nnodes",), _STR, "1"),
    (("--node-rank",), _STR, "0"),
    (("--dist-init-addr",), _STR, None),
    (("--moe-a2a-backend",), _STR, None),
    # HiCache, the host tier of the radix cache (sglang/srt/server_args.py): host pool size as a ratio of the
    # device pool, or in whole GB per rank (overrides the ratio), and how blocks are written to the host.
    (("--hicache-ratio",), _FLOAT, 2.0),
    (("--hicache-size",), _INT, 0),
    (("--hicache-write-policy",), ("write_back", "write_through", "write_through_selective"), "write_through"),
    (("--warmups",), _STR, None),
    (("--decode-log-interval",), _INT, 40),
    (("--bucket-time-to-first-token",), "floats", None),
    (("--bucket-inter-token-latency",), "floats", None),
    (("--bucket-e2e-request-latency",), "floats", None),
    (("--prompt-tokens-buckets",), "list", None),
    (("--generation-tokens-buckets",), "list", None),
    (("--extra-metric-labels",), _STR, None),
    (("--tokenizer-metrics-allowed-custom-labels",), "list", None),
    (("--kv-events-config",), _STR, None),
    (("--file-storage-path",), _STR, "sglang_storage"),
]
SWITCHES = [
    "disable-radix-cache",
    "enable-lora",
    "enable-metrics",
    "enable-metrics-for-all-schedulers",
    "trust-remote-code",
    "enable-dp-attention",
    "enable-ep-moe",
    "disable-cuda-graph",
    "enable-torch-compile",
    "enable-mixed-chunk",
    "enable-hierarchical-cache",
    "enable-cache-report",
    "collect-tokens-histogram",
    "log-requests",
    "skip-server-warmup",
    "enable-p2p-check",
    "is-embedding",
    "enable-multimodal",
    "disable-overlap-schedule",
    "show-time-cost",
    "enable-memory-saver",
    "enable-weights-cpu-backup",
]

# Releasing and resuming the GPU memory (SGLang's equivalent of vLLM's sleep mode; not in reference/engines.md: from
# SGLang's server (`/release_memory_occupation`, `/resume_memory_occupation`, a JSON body with optional `tags`,
# "weights" and "kv_cache") and its server arguments; docs/sleep-mode.md says what is uncertain). The memory saver
# lets the engine give back the weights' and the KV cache's memory; the CPU backup keeps a copy of the weights in host
# memory so that a resume brings them back (vLLM's level 1). Without it the weights' memory comes back empty.
MEMORY_SAVER_FLAG = "--enable-memory-saver"
WEIGHTS_CPU_BACKUP_FLAG = "--enable-weights-cpu-backup"
RELEASE_MEMORY_PATH = "/release_memory_occupation"  # POST {"tags": ["weights", "kv_cache"]} (optional: all)
RESUME_MEMORY_PATH = "/resume_memory_occupation"  # POST {"tags": [...]} (optional: all)
MEMORY_TAGS = ("weights", "kv_cache")

# The versions that have a flag, canonical spelling -> Span(since, until) (enginevocab/versions.py).
# reference/engines.md documents 0.5.23 only (it says --attn-dp-size replaces the deprecated
# --enable-dp-attention, without versions), so no span is known: every flag is taken to be in every version.
SPANS: dict[str, Span] = {}

# Who sets what (canonical spellings; aliases and abbreviations resolve to these); "" is the control plane.
OWNED: dict[str, tuple[str, ...]] = {
    "max_model_len": ("--context-length",),
    "kv_cache_dtype": ("--kv-cache-dtype",),
    "enable_prefix_caching": ("--disable-radix-cache",),
    "enable_chunked_prefill": ("--chunked-prefill-size",),
    "gpu_memory_utilization": ("--mem-fraction-static",),
    "max_num_seqs": ("--max-running-requests",),
    "tensor_parallel_size": ("--tp-size",),
    "pipeline_parallel_size": ("--pp-size",),
    "quantization": ("--quantization",),
    "speculative_model": (
        "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
        "--speculative-eagle-topk", "--speculative-num-draft-tokens",
    ),
    "kv_offload": ("--enable-hierarchical-cache", "--hicache-ratio", "--hicache-size", "--hicache-write-policy"),
    "": (
        "--model-path", "--served-model-name", "--host", "--port", "--enable-metrics", "--enable-lora",
        "--lora-paths", "--disaggregation-mode", "--disaggregation-bootstrap-port",
        "--disaggregation-transfer-backend", "--dist-init-addr", "--nnodes", "--node-rank", "--dp-size",
        "--api-key", MEMORY_SAVER_FLAG, WEIGHTS_CPU_BACKUP_FLAG,
    ),
}
_FILE = "it reads a file or path inside the pod"
_LOGS = "it writes prompts or outputs to the engine's logs"
_TELEMETRY = "it changes the metrics the product's telemetry reads"
_PARALLEL = "it changes how the engine spreads over GPUs and nodes, which the product sizes pods for"
_ON = Switch()
# The documented flags (reference/engines.md; no SGLang runs here to read its parser) a tenant may set: flag ->
# the values allowed. The rest are the product's (OWNED), staff's (PLATFORM) or no one's (REFUSED).
TENANT: dict[str, object] = {
    "--ep-size": Num(1, 64), "--page-size": Num(1, 256), "--max-prefill-tokens": Num(1, MAX_NUM_BATCHED_TOKENS),
    "--max-queued-requests": Num(1, 100_000), "--max-total-tokens": Num(1, 100_000_000),
    "--schedule-policy": OneOf(("lpm", "random", "fcfs", "dfs-weight", "lof", "priority")),
    "--schedule-conservativeness": Num(0, 10, integer=False), "--max-loras-per-batch": Num(1, 64),
    "--max-loaded-loras": Num(1, 64), "--max-lora-rank": Num(1, 512), "--lora-target-modules": ListOf(Name(), 64),
    "--lora-backend": Name(), "--dtype": OneOf(("auto", "half", "float16", "bfloat16", "float", "float32")),
    "--random-seed": Num(0, 2**31 - 1),
    "--load-format": OneOf(("auto", "safetensors", "dummy", "gguf", "bitsandbytes")),
    "--log-level": OneOf(("critical", "error", "warning", "info")), "--stream-interval": Num(1, 1024),
    "--watchdog-timeout": Num(1, 3600, integer=False), "--cuda-graph-max-bs": Num(1, 8192),
    "--attention-backend": Name(), "--sampling-backend": Name(), "--grammar-backend": Name(),
    "--reasoning-parser": Name(), "--tool-call-parser": Name(), "--moe-a2a-backend": Name(),
    "--warmups": Name(r"[a-z0-9_,-]{1,128}"), "--decode-log-interval": Num(1, 10_000),
    **{f"--{name}": _ON for name in (
        "enable-metrics-for-all-schedulers", "enable-ep-moe", "disable-cuda-graph", "enable-torch-compile",
        "enable-mixed-chunk", "enable-cache-report", "collect-tokens-histogram", "skip-server-warmup",
        "enable-p2p-check", "is-embedding", "enable-multimodal", "disable-overlap-schedule", "show-time-cost")},
}
# Staff only (a platform-wide Runtime's default args): flag -> why.
PLATFORM: dict[str, str] = {
    "--trust-remote-code": "it runs the model repository's own Python code",
    "--tokenizer-path": _FILE, "--download-dir": _FILE, "--chat-template": _FILE, "--file-storage-path": _FILE,
    "--revision": "it loads weights of another revision than the catalog's",
    "--kv-events-config": "it configures a publisher the engine loads",
    "--log-requests": _LOGS, "--log-requests-level": _LOGS,
    "--bucket-time-to-first-token": _TELEMETRY, "--bucket-inter-token-latency": _TELEMETRY,
    "--bucket-e2e-request-latency": _TELEMETRY, "--prompt-tokens-buckets": _TELEMETRY,
    "--generation-tokens-buckets": _TELEMETRY, "--extra-metric-labels": _TELEMETRY,
    "--tokenizer-metrics-allowed-custom-labels": _TELEMETRY,
    "--attn-dp-size": _PARALLEL, "--enable-dp-attention": _PARALLEL, "--load-balance-method": _PARALLEL,
    "--disaggregation-ib-device": "it picks the node's network devices",
    "--device": "the scheduler gives the pod its devices",
}
REFUSED: dict[str, str] = {}
