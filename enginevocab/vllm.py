"""vLLM 0.32.0 (`vllm serve`): the flags the renderer writes and kubesim's simulated engine reads, and who owns them.

The pinned version is the one whose real parser the `engines` extra installs (`make venv`): every flag of that
parser is in `vllm_parser.json` and classified in `vllm_classes.py`; FLAGS and BOOLS below are the typed
subset kubesim's parser (`kubesim/engines/flags.py`) builds, each a flag of that parser (a test checks it).
"""

from __future__ import annotations

from enginevocab.values import APPEND as _APPEND
from enginevocab.values import FLOAT as _FLOAT
from enginevocab.values import INT as _INT
from enginevocab.values import STR as _STR
from enginevocab.values import human_readable_int as _HUMAN_INT
from enginevocab.values import json_or_str as _json_or_str
from enginevocab.values import model_len as _model_len
from enginevocab.versions import Span
from enginevocab.vllm_classes import OPTIONS

VERSION = "0.32.0"
# The default runtime: the image and tag the demo seed and the benchmarks run.
IMAGE = "vllm/vllm-openai"
TAG = f"v{VERSION}"
IMAGE_REF = f"{IMAGE}:{TAG}"
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92  # engines.md §3
# --max-lora-rank only accepts these values (engines.md §3).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# Sleep mode (vllm/entrypoints/serve/dev/sleep/api_router.py): the flag that lets the engine sleep, and the
# environment switch without which the API server mounts none of its endpoints (VLLM_SERVER_DEV_MODE=1).
SLEEP_MODE_FLAG = "--enable-sleep-mode"
SLEEP_ENDPOINTS_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
SLEEP_PATH = "/sleep"  # POST ?level=0|1|2 (default 1) &mode=abort|wait|keep (default abort)
WAKE_UP_PATH = "/wake_up"  # POST [?tags=weights&tags=kv_cache]; {"status": "awake" | "sleeping", "tags"}
IS_SLEEPING_PATH = "/is_sleeping"  # GET; {"is_sleeping": bool}
# After a level 2 sleep the weights are gone: a wake loads them again through the dev-mode RPC endpoint.
COLLECTIVE_RPC_PATH = "/collective_rpc"
RELOAD_WEIGHTS_RPC = {"method": "reload_weights"}
# vllm:engine_sleep_state's `sleep_state` label values, awake first (vllm/v1/metrics/loggers.py).
SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
# The KV-cache dtypes the structured setting offers (sized by capacity.arch.kv_dtype_bytes); the flag itself takes
# every one of the parser's choices (below).
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4")


def _parser_choices(flag: str) -> tuple[str, ...]:
    """The pinned parser's own choices for `flag` (vllm_parser.json), never typed again here."""
    return tuple(str(choice) for choice in OPTIONS[flag]["choices"] if choice is not None)



# (flags, type or "bool", default); vLLM booleans come in --x / --no-x pairs.
FLAGS: list[tuple[tuple[str, ...], object, object]] = [
    (("--model",), _STR, None),
    (("--served-model-name",), "list", None),
    (("--host",), _STR, None),
    (("--port",), _INT, 8000),
    (("--tensor-parallel-size", "-tp"), _INT, 1),
    (("--pipeline-parallel-size", "-pp"), _INT, 1),
    (("--data-parallel-size", "-dp"), _INT, 1),
    (("--data-parallel-size-local", "-dpl"), _INT, None),
    (("--data-parallel-address", "-dpa"), _STR, None),
    (("--data-parallel-rpc-port", "-dpp"), _INT, None),
    (("--data-parallel-rank", "-dpn"), _INT, None),
    (("--data-parallel-start-rank", "-dpr"), _INT, None),
    (("--data-parallel-backend", "-dpb"), _STR, "mp"),
    (("--decode-context-parallel-size", "-dcp"), _INT, 1),
    (("--api-server-count", "-asc"), _INT, None),
    (("--nnodes", "-n"), _INT, 1),
    (("--node-rank", "-r"), _INT, 0),
    (("--master-addr",), _STR, "127.0.0.1"),
    (("--master-port",), _INT, 29501),
    (("--max-model-len",), _model_len, None),
    (("--gpu-memory-utilization", "--device-memory-utilization"), _FLOAT, DEFAULT_GPU_MEMORY_UTILIZATION),
    (("--kv-cache-memory-bytes",), _HUMAN_INT, None),
    (("--kv-cache-dtype",), _parser_choices("--kv-cache-dtype"), "auto"),
    (("--block-size",), _INT, None),
    (("--num-gpu-blocks-override",), _INT, None),
    (("--cpu-offload-gb",), _FLOAT, 0.0),
    (("--max-num-batched-tokens",), _HUMAN_INT, None),
    (("--max-num-seqs",), _INT, None),
    (("--long-prefill-token-threshold",), _INT, 0),
    (("--scheduling-policy",), ("fcfs", "priority"), "fcfs"),
    (("--quantization", "-q"), _STR, None),
    (("--dtype",), ("auto", "half", "float16", "bfloat16", "float", "float32"), "auto"),
    (("--seed",), _INT, 0),
    (("--max-loras",), _INT, 1),
    (("--max-lora-rank",), LORA_RANKS, 16),
    (("--max-cpu-loras",), _INT, None),
    (("--lora-dtype",), _parser_choices("--lora-dtype"), "auto"),
    (("--lora-modules",), "list", None),
    (("--kv-transfer-config",), _json_or_str, None),
    (("--kv-events-config",), _json_or_str, None),
    (("--speculative-config", "-sc"), _json_or_str, None),
    (("--spec-method",), _parser_choices("--spec-method"), None),
    (("--spec-model",), _STR, None),
    (("--spec-tokens",), _INT, None),
    (("--compilation-config", "-cc"), _json_or_str, None),
    (("--additional-config",), _STR, None),
    (("--custom-histogram-buckets",), _json_or_str, None),
    (("--show-hidden-metrics-for-version",), _STR, None),
    (("--hf-overrides",), _STR, None),
    (("--override-generation-config",), _json_or_str, None),
    (("--generation-config",), _STR, "auto"),
    (("--tokenizer",), _STR, None),
    (("--tokenizer-mode",), _STR, "auto"),
    (("--revision",), _STR, None),
    (("--code-revision",), _STR, None),
    (("--tokenizer-revision",), _STR, None),
    (("--download-dir",), _STR, None),
    (("--load-format",), _STR, "auto"),
    (("--model-loader-extra-config",), _STR, None),
    (("--ignore-patterns",), "list", None),
    (("--hf-token",), _STR, None),
    (("--hf-config-path",), _STR, None),
    (("--config",), _STR, None),
    (("--config-format",), _STR, "auto"),
    (("--max-logprobs",), _INT, 20),
    (("--logprobs-mode",), _parser_choices("--logprobs-mode"), "raw_logprobs"),
    (("--runner",), ("auto", "generate", "pooling", "draft"), "auto"),
    (("--convert",), _parser_choices("--convert"), "auto"),
    (("--model-impl",), _STR, "auto"),
    (("--api-key",), "list", None),
    (("--chat-template",), _STR, None),
    (("--chat-template-content-format",), _parser_choices("--chat-template-content-format"), "auto"),
    (("--response-role",), _STR, "assistant"),
    (("--tool-call-parser",), _STR, None),
    (("--tool-parser-plugin",), _STR, ""),
    (("--reasoning-parser",), _STR, ""),
    (("--structured-outputs-config",), _json_or_str, None),
    (("--uvicorn-log-level",), ("critical", "error", "warning", "info", "debug", "trace"), "info"),
    (("--root-path",), _STR, None),
    (("--middleware",), _APPEND, None),
    (("--allowed-origins",), _json_or_str, None),
    (("--allowed-methods",), _json_or_str, None),
    (("--allowed-headers",), _json_or_str, None),
    (("--ssl-keyfile",), _STR, None),
    (("--ssl-certfile",), _STR, None),
    (("--ssl-ca-certs",), _STR, None),
    (("--ssl-cert-reqs",), _INT, 0),
    (("--uds",), _STR, None),
    (("--max-log-len",), _INT, None),
    (("--log-config-file",), _STR, None),
    (("--otlp-traces-endpoint",), _STR, None),
    (("--collect-detailed-traces",), _parser_choices("--collect-detailed-traces"), None),
    (("--distributed-executor-backend",), _STR, None),
    (("--max-parallel-loading-workers",), _INT, None),
    (("--limit-mm-per-prompt",), _json_or_str, None),
    (("--mm-processor-kwargs",), _json_or_str, None),
    (("--mm-processor-cache-gb",), _FLOAT, 4.0),
    (("--allowed-local-media-path",), _STR, ""),
    (("--prefix-caching-hash-algo",), _parser_choices("--prefix-caching-hash-algo"), "sha256"),
    # The KV-cache CPU tier (vllm/config/kv_offload.py): GiB summed over TP x PP ranks, and its backend.
    (("--kv-offloading-size",), _FLOAT, None),
    (("--kv-offloading-backend",), ("native", "lmcache"), None),
    (("--mamba-cache-dtype",), _parser_choices("--mamba-cache-dtype"), "auto"),
    (("--mamba-ssm-cache-dtype",), _parser_choices("--mamba-ssm-cache-dtype"), "auto"),
    (("--scheduler-cls",), _STR, None),
    (("--worker-cls",), _STR, "auto"),
    (("--worker-extension-cls",), _STR, ""),
    (("--eplb-config",), _json_or_str, None),
    (("--all2all-backend",), _parser_choices("--all2all-backend"), None),
    (("--pooler-config",), _json_or_str, None),
    (("--logits-processors",), "list", None),
    (("--max-num-queued-reqs",), _INT, None),
    (("--max-num-queued-tokens",), _HUMAN_INT, None),
    (("--stream-interval",), _INT, 1),
]
BOOLS: list[tuple[str, bool | None]] = [
    ("enable-prefix-caching", None),
    ("enable-chunked-prefill", None),
    ("enable-lora", None),
    ("fully-sharded-loras", False),
    ("trust-remote-code", False),
    ("enforce-eager", False),
    ("disable-log-stats", False),
    ("enable-log-requests", False),
    ("disable-uvicorn-access-log", False),
    ("disable-fastapi-docs", False),
    ("enable-request-id-headers", False),
    ("enable-auto-tool-choice", False),
    ("enable-prompt-tokens-details", False),
    ("enable-server-load-tracking", False),
    ("enable-force-include-usage", False),
    ("enable-tokenizer-info-endpoint", False),
    ("enable-log-outputs", False),
    ("return-tokens-as-token-ids", False),
    ("enable-sleep-mode", False),
    ("enable-expert-parallel", False),
    ("enable-eplb", False),
    ("enable-dbo", False),
    ("data-parallel-hybrid-lb", False),
    ("data-parallel-external-lb", False),
    ("disable-custom-all-reduce", False),
    ("disable-sliding-window", False),
    ("disable-cascade-attn", False),
    ("skip-tokenizer-init", False),
    ("enable-prompt-embeds", False),
    ("kv-sharing-fast-prefill", False),
    ("disable-hybrid-kv-cache-manager", False),
    ("async-scheduling", None),
    ("kv-cache-metrics", False),
    ("enable-mfu-metrics", False),
    ("headless", False),
    ("allow-credentials", False),
    ("enable-ssl-refresh", False),
    ("use-tqdm-on-load", True),
    ("disable-chunked-mm-input", False),
    ("skip-mm-profiling", False),
]
SHORT_BOOLS = {"enable-expert-parallel": "-ep", "data-parallel-hybrid-lb": "-dph", "data-parallel-external-lb": "-dpe"}
# Switches of BOOLS that have no --no- form (store_true in vLLM's parser).
STORE_TRUE = ("disable-log-stats", "headless")


def optimization_level(token: str, following: str | None) -> str | None:
    """The value of vLLM's -O3, -O=3 or -O 3 ("" when it is the next word), which its parser reads as
    --optimization-level; None for any other argument (a lone -O before anything but 0-3 included)."""
    if not token.startswith("-O"):
        return None
    if token == "-O":
        return "" if following in ("0", "1", "2", "3") else None
    return token[3:] if token[2] == "=" else token[2:]

# The versions that have a flag, canonical spelling -> Span(since, until) (enginevocab/versions.py), read by
# the argument policy, the renderer's checks and kubesim's parser. Only 0.32.0's parser has been read, so no
# flag has a known first or last version: the table is empty and every flag counts as in every version.
SPANS: dict[str, Span] = {}


# Who sets what (canonical spellings; aliases, abbreviations and --no- forms resolve to these).
# Owned by the product: a structured engine setting renders it, or the control plane does.
OWNED: dict[str, tuple[str, ...]] = {
    "max_model_len": ("--max-model-len",),
    "kv_cache_dtype": ("--kv-cache-dtype",),
    "enable_prefix_caching": ("--enable-prefix-caching",),
    "enable_chunked_prefill": ("--enable-chunked-prefill",),
    "gpu_memory_utilization": ("--gpu-memory-utilization", "--kv-cache-memory-bytes"),
    "max_num_seqs": ("--max-num-seqs",),
    "max_num_batched_tokens": ("--max-num-batched-tokens",),
    "tensor_parallel_size": ("--tensor-parallel-size",),
    "pipeline_parallel_size": ("--pipeline-parallel-size",),
    "quantization": ("--quantization",),
    "speculative_model": ("--speculative-config", "--spec-method", "--spec-model", "--spec-tokens"),
    "kv_offload": ("--kv-offloading-backend", "--kv-offloading-size"),
    "": (
        "--model", "--served-model-name", "--host", "--port", "--enable-lora", "--lora-modules",
        "--max-lora-rank", "--max-loras", "--kv-transfer-config", "--nnodes", "--node-rank",
        "--master-addr", "--master-port", "--headless", "--data-parallel-size", "--data-parallel-size-local",
        "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-rank",
        "--data-parallel-start-rank", "--data-parallel-backend", "--api-server-count", "--api-key",
    ),
}
