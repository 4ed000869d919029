"""Command lines of the real engines: vLLM 0.33 (`vllm serve`) and SGLang 0.5 (`sglang.launch_server`).

Parsed with argparse over the engines' own flag names, so a flag the engine lacks or a value of the wrong
type fails with argparse's wording ("error: unrecognized arguments: --foo") and the container exits.
Only flags the simulation uses are typed; the rest are accepted as the engine would and ignored.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex

from capacity.arch import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION
from kubesim.workload import WorkloadExit


class EngineArgError(Exception):
    """A command line the engine rejects; `usage` and `message` are what the engine prints."""

    def __init__(self, prog: str, usage: str, message: str):
        super().__init__(f"{prog}: error: {message}")
        self.lines = [usage.rstrip(), f"{prog}: error: {message}"]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print and sys.exit(2)
        raise EngineArgError(self.prog, self.format_usage(), message)


def _bool(value: str) -> bool:
    v = value.lower()
    if v in ("1", "true", "yes"):
        return True
    if v in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value: {value!r}")


def _model_len(value: str) -> int:
    """vLLM accepts 1k/1K/1m suffixes and -1/auto."""
    v = value.strip().lower()
    if v in ("auto", "-1"):
        return -1
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([km]?)", v)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid max model length: {value!r}")
    mult = {"": 1, "k": 1000, "m": 1000**2}[m.group(2)]
    return int(float(m.group(1)) * mult)


def _json_or_str(value: str):
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"invalid JSON: {value!r} ({e.msg})") from None


_STR, _INT, _FLOAT = str, int, float

# (flags, type or "bool", default); vLLM booleans come in --x / --no-x pairs.
VLLM_FLAGS: list[tuple[tuple[str, ...], object, object]] = [
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
    (("--data-parallel-backend", "-dpb"), ("mp", "ray"), "mp"),
    (("--decode-context-parallel-size", "-dcp"), _INT, 1),
    (("--api-server-count",), _INT, None),
    (("--nnodes", "-n"), _STR, "1"),
    (("--node-rank", "-r"), _STR, "0"),
    (("--master-addr",), _STR, "127.0.0.1"),
    (("--master-port",), _INT, 29501),
    (("--max-model-len",), _model_len, None),
    (("--gpu-memory-utilization",), _FLOAT, VLLM_DEFAULT_GPU_MEMORY_UTILIZATION),
    (("--kv-cache-memory-bytes",), _INT, None),
    (
        ("--kv-cache-dtype",),
        ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4"),
        "auto",
    ),
    (("--block-size",), _INT, None),
    (("--num-gpu-blocks-override",), _INT, None),
    (("--swap-space",), _FLOAT, 4.0),
    (("--cpu-offload-gb",), _FLOAT, 0.0),
    (("--max-num-batched-tokens",), _INT, None),
    (("--max-num-seqs",), _INT, None),
    (("--max-num-partial-prefills",), _INT, 1),
    (("--max-long-partial-prefills",), _INT, 1),
    (("--long-prefill-token-threshold",), _INT, 0),
    (("--scheduling-policy",), ("fcfs", "priority"), "fcfs"),
    (("--quantization", "-q"), _STR, None),
    (("--dtype",), ("auto", "half", "float16", "bfloat16", "float", "float32"), "auto"),
    (("--seed",), _INT, 0),
    (("--max-loras",), _INT, 1),
    (("--max-lora-rank",), ("1", "8", "16", "32", "64", "128", "256", "320", "512"), "16"),
    (("--max-cpu-loras",), _INT, None),
    (("--lora-dtype",), _STR, "auto"),
    (("--lora-modules",), "list", None),
    (("--kv-transfer-config",), _json_or_str, None),
    (("--kv-events-config",), _json_or_str, None),
    (("--speculative-config", "-sc"), _json_or_str, None),
    (("--spec-method",), _STR, None),
    (("--spec-model",), _STR, None),
    (("--spec-tokens",), _INT, None),
    (("--compilation-config", "-O"), _STR, None),
    (("--additional-config",), _json_or_str, None),
    (("--custom-histogram-buckets",), _json_or_str, None),
    (("--show-hidden-metrics-for-version",), _STR, None),
    (("--hf-overrides",), _STR, None),
    (("--override-generation-config",), _STR, None),
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
    (("--logprobs-mode",), _STR, "raw_logprobs"),
    (("--rope-scaling",), _STR, None),
    (("--rope-theta",), _FLOAT, None),
    (("--runner",), ("auto", "generate", "pooling", "draft"), "auto"),
    (("--convert",), _STR, "auto"),
    (("--task",), _STR, None),
    (("--model-impl",), _STR, "auto"),
    (("--api-key",), "list", None),
    (("--chat-template",), _STR, None),
    (("--chat-template-content-format",), _STR, "auto"),
    (("--response-role",), _STR, "assistant"),
    (("--tool-call-parser",), _STR, None),
    (("--tool-parser-plugin",), _STR, ""),
    (("--reasoning-parser",), _STR, ""),
    (("--structured-outputs-config",), _STR, None),
    (("--uvicorn-log-level",), ("critical", "error", "warning", "info", "debug", "trace"), "info"),
    (("--root-path",), _STR, None),
    (("--middleware",), "list", None),
    (("--allowed-origins",), _STR, None),
    (("--allowed-methods",), _STR, None),
    (("--allowed-headers",), _STR, None),
    (("--ssl-keyfile",), _STR, None),
    (("--ssl-certfile",), _STR, None),
    (("--ssl-ca-certs",), _STR, None),
    (("--ssl-cert-reqs",), _INT, 0),
    (("--uds",), _STR, None),
    (("--max-log-len",), _INT, None),
    (("--log-config-file",), _STR, None),
    (("--otlp-traces-endpoint",), _STR, None),
    (("--collect-detailed-traces",), _STR, None),
    (("--distributed-executor-backend",), _STR, None),
    (("--max-parallel-loading-workers",), _INT, None),
    (("--limit-mm-per-prompt",), _STR, None),
    (("--mm-processor-kwargs",), _STR, None),
    (("--mm-processor-cache-gb",), _FLOAT, 4.0),
    (("--allowed-local-media-path",), _STR, ""),
    (("--prefix-caching-hash-algo",), _STR, "sha256"),
    (("--kv-offloading-size",), _FLOAT, None),
    (("--kv-offloading-backend",), _STR, None),
    (("--mamba-cache-dtype",), _STR, "auto"),
    (("--mamba-ssm-cache-dtype",), _STR, "auto"),
    (("--num-lookahead-slots",), _INT, 0),
    (("--scheduler-cls",), _STR, None),
    (("--worker-cls",), _STR, "auto"),
    (("--worker-extension-cls",), _STR, ""),
    (("--eplb-config",), _STR, None),
    (("--all2all-backend",), _STR, None),
    (("--pooler-config",), _STR, None),
    (("--logits-processors",), "list", None),
    (("--override-attention-dtype",), _STR, None),
    (("--max-num-queued-reqs",), _INT, None),
    (("--max-num-queued-tokens",), _INT, None),
    (("--stream-interval",), _INT, 1),
]
VLLM_BOOLS: list[tuple[str, bool | None]] = [
    ("enable-prefix-caching", None),
    ("enable-chunked-prefill", None),
    ("enable-lora", None),
    ("enable-lora-bias", False),
    ("fully-sharded-loras", False),
    ("trust-remote-code", False),
    ("enforce-eager", False),
    ("disable-log-stats", False),
    ("enable-log-requests", False),
    ("disable-log-requests", True),
    ("disable-uvicorn-access-log", False),
    ("disable-fastapi-docs", False),
    ("disable-frontend-multiprocessing", False),
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
    ("calculate-kv-scales", False),
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
VLLM_SHORT_BOOLS = {"enable-expert-parallel": "-ep"}

SGLANG_FLAGS: list[tuple[tuple[str, ...], object, object]] = [
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
    (
        ("--kv-cache-dtype",),
        ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1", "nvfp4"),
        "auto",
    ),
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
    (("--hicache-ratio",), _FLOAT, 2.0),
    (("--hicache-size",), _INT, 0),
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
SGLANG_SWITCHES = [
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
]


def _add(parser: argparse.ArgumentParser, flags, kind, default) -> None:
    if kind == "list":
        parser.add_argument(*flags, nargs="+", default=default)
    elif kind == "floats":
        parser.add_argument(*flags, nargs="+", type=float, default=default)
    elif isinstance(kind, tuple):
        parser.add_argument(*flags, choices=kind, default=default)
    else:
        parser.add_argument(*flags, type=kind, default=default)


def vllm_parser(prog: str, positional_model: bool) -> _Parser:
    p = _Parser(prog=prog, allow_abbrev=False, add_help=False)
    if positional_model:
        p.add_argument("model_tag", nargs="?")
    for flags, kind, default in VLLM_FLAGS:
        _add(p, flags, kind, default)
    for name, default in VLLM_BOOLS:
        names = [f"--{name}"] + ([VLLM_SHORT_BOOLS[name]] if name in VLLM_SHORT_BOOLS else [])
        p.add_argument(*names, action=argparse.BooleanOptionalAction, default=default)
    return p


def sglang_parser(prog: str) -> _Parser:
    p = _Parser(prog=prog, add_help=False)
    for flags, kind, default in SGLANG_FLAGS:
        _add(p, flags, kind, default)
    for name in SGLANG_SWITCHES:
        p.add_argument(f"--{name}", action="store_true")
    return p


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def expand(words: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion in command and args."""
    return [_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), w) for w in words]


def command_line(container: dict, env: dict[str, str]) -> list[str]:
    """The container's argv (command + args), unwrapping `sh -c "..."` scripts."""
    argv = expand(list(container.get("command") or []) + list(container.get("args") or []), env)
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in ("sh", "bash") and argv[1] in ("-c", "-lc", "-ec"):
        script = argv[2]
        for part in re.split(r"&&|;|\|\|", script):
            words = shlex.split(part)
            if words and words[0] == "exec":
                words = words[1:]
            if any(w in ("serve", "-m") or "launch_server" in w or "launch_router" in w for w in words):
                return words
        return shlex.split(script)
    return argv


def normalise_vllm_underscores(argv: list[str]) -> list[str]:
    """vLLM accepts `--max_num_seqs` for `--max-num-seqs`."""
    out = []
    for a in argv:
        if a.startswith("--"):
            key, sep, val = a.partition("=")
            a = key.replace("_", "-") + sep + val
        out.append(a)
    return out


def parse_vllm(argv: list[str]) -> tuple[argparse.Namespace, str]:
    """(namespace, prog) for a vLLM container argv; argv empty means the image entrypoint with no args."""
    rest = list(argv)
    positional = True
    prog = "vllm serve"
    if rest and rest[0].rsplit("/", 1)[-1] == "vllm":
        rest = rest[1:]
        if not rest or rest[0] != "serve":
            raise WorkloadExit(
                "vllm: error: argument subparser: invalid choice: "
                f"{(rest or [''])[0]!r} (choose from 'chat', 'complete', 'serve', 'bench', 'collect-env', "
                "'run-batch')",
                exit_code=2,
            )
        rest = rest[1:]
    elif rest and rest[0].rsplit("/", 1)[-1].startswith("python"):
        if len(rest) < 3 or rest[1] != "-m":
            raise WorkloadExit(f"{rest[0]}: can't open file: not a vLLM entrypoint", exit_code=2)
        module = rest[2]
        if module != "vllm.entrypoints.openai.api_server":
            raise WorkloadExit(f"/usr/bin/python3: No module named {module}", exit_code=1)
        rest = rest[3:]
        positional = False
        prog = "api_server.py"
    try:
        ns = vllm_parser(prog, positional).parse_args(normalise_vllm_underscores(rest))
    except EngineArgError as e:
        raise WorkloadExit(e.lines[-1], exit_code=2, logs=e.lines) from None
    model = getattr(ns, "model_tag", None) or ns.model
    if getattr(ns, "model_tag", None) and ns.model and ns.model_tag != ns.model:
        raise WorkloadExit(
            f"ValueError: With `vllm serve`, you should provide the model as a positional argument or in a "
            f"config file instead of via the `--model` option. The `--model` option will be removed in a "
            f"future version. (positional {ns.model_tag!r}, --model {ns.model!r})"
        )
    ns.model = model or "Qwen/Qwen3-0.6B"  # vLLM's default model when none is given
    return ns, prog


def parse_sglang(argv: list[str]) -> tuple[argparse.Namespace, str]:
    rest = list(argv)
    prog = "launch_server.py"
    if rest and rest[0].rsplit("/", 1)[-1] == "sglang":
        if len(rest) < 2 or rest[1] != "serve":
            raise WorkloadExit(
                f"sglang: error: invalid choice: {(rest[1:] or [''])[0]!r} (choose from 'serve')", exit_code=2
            )
        rest = rest[2:]
        prog = "sglang serve"
    elif rest and rest[0].rsplit("/", 1)[-1].startswith("python"):
        if len(rest) < 3 or rest[1] != "-m":
            raise WorkloadExit(f"{rest[0]}: not an SGLang entrypoint", exit_code=2)
        if rest[2] not in ("sglang.launch_server", "sglang.cli.serve"):
            raise WorkloadExit(f"/usr/bin/python3: No module named {rest[2]}", exit_code=1)
        rest = rest[3:]
    try:
        ns = sglang_parser(prog).parse_args(rest)
    except EngineArgError as e:
        raise WorkloadExit(e.lines[-1], exit_code=2, logs=e.lines) from None
    if not ns.model_path:
        lines = [
            sglang_parser(prog).format_usage().rstrip(),
            f"{prog}: error: the following arguments are required: --model-path/--model",
        ]
        raise WorkloadExit(lines[-1], exit_code=2, logs=lines)
    return ns, prog
