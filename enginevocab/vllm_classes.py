"""Every flag of the pinned vLLM's own parser, classified: tenant-settable (with its bound), platform or refused.

`vllm_parser.json` is that parser as `vllm_parser_dump.py` prints it from the real vLLM (`make venv`); a test
fails when the two differ, or when a flag of it is in none of TENANT, PLATFORM, REFUSED and `vllm.OWNED`
(the product's own), or in more than one. A tenant may pass only TENANT flags, with values inside their
bounds; staff may also pass PLATFORM flags in a platform-wide Runtime's default args; REFUSED is for no one.
"""

from __future__ import annotations

import json
from pathlib import Path

from enginevocab.bounds import MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS, Json, ListOf, Name, Num, OneOf, Switch

PARSER = json.loads((Path(__file__).with_name("vllm_parser.json")).read_text())
# Canonical spelling (the first option string) -> the parser's facts for it.
OPTIONS: dict[str, dict] = {option["flags"][0]: option for option in PARSER["options"]}


def _parser_choices(flag: str, *leave_out) -> OneOf:
    """The parser's own choices for `flag`, less `leave_out`."""
    return OneOf(tuple(c for c in OPTIONS[flag]["choices"] if c is not None and c not in leave_out))


_ON = Switch()
_INT = Num(0, 2**31 - 1)
_TEXT = Name(r"[A-Za-z0-9_./*,:-]{1,256}")  # file globs, endpoint lists: no spaces, quotes or shell
_NAMES = ListOf(Name(), 64)
_SIZES = ListOf(Num(1, 8192), 128)
_SAMPLING = Json({
    "temperature": Num(0, 2, integer=False), "top_p": Num(0, 1, integer=False), "top_k": Num(-1, 1000),
    "min_p": Num(0, 1, integer=False), "repetition_penalty": Num(0, 2, integer=False),
    "presence_penalty": Num(-2, 2, integer=False), "frequency_penalty": Num(-2, 2, integer=False),
    "max_new_tokens": Num(1, 1_048_576),
})
# Only compile settings that pick among vLLM's own modes: no passes named by import path (inductor_passes),
# no backend by name, no paths (debug_dump_path, cache_dir), no raw Inductor configuration.
_COMPILATION = Json({
    "mode": Num(0, 3), "cudagraph_mode": OneOf(("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY",
                                                 "FULL_AND_PIECEWISE")),
    "cudagraph_capture_sizes": _SIZES, "max_cudagraph_capture_size": Num(1, 8192),
    "compile_sizes": _SIZES, "cudagraph_num_of_warmups": Num(0, 16), "use_inductor_graph_partition": _ON,
})
# Not disable_any_whitespace or disable_additional_properties: vLLM allows each with some backends only.
_STRUCTURED = Json({
    "backend": OneOf(("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")), "enable_in_reasoning": _ON,
})

# Flag -> the values a tenant may give it.
TENANT: dict[str, object] = {
    # The OpenAI server's behaviour towards its one caller, the gateway.
    "--chat-template-content-format": _parser_choices("--chat-template-content-format"),
    "--default-chat-template-kwargs": Json({"enable_thinking": _ON}),
    "--response-role": Name(r"[A-Za-z_]{1,32}"), "--return-tokens-as-token-ids": _ON,
    "--enable-auto-tool-choice": _ON, "--exclude-tools-when-tool-choice-none": _ON, "--tool-call-parser": Name(),
    "--tool-strict-level": _parser_choices("--tool-strict-level"), "--enable-prompt-tokens-details": _ON,
    "--enable-server-load-tracking": _ON, "--sse-keep-alive-interval": Num(0, 300),
    "--enable-tokenizer-info-endpoint": _ON, "--cohere-is-reasoning-model": _ON, "--cohere-format": Name(),
    "--anthropic-disabled-thinking-effort": _parser_choices("--anthropic-disabled-thinking-effort"),
    "--fingerprint-mode": _parser_choices("--fingerprint-mode"), "--fingerprint-value": Name(),
    "--uvicorn-log-level": OneOf(("critical", "error", "warning", "info")),  # debug and trace log requests
    "--disable-uvicorn-access-log": _ON, "--disable-access-log-for-endpoints": _TEXT,
    "--enable-request-id-headers": _ON, "--disable-fastapi-docs": _ON, "--enable-offline-docs": _ON,
    "--h11-max-incomplete-event-size": Num(1024, 64 * 2**20), "--h11-max-header-count": Num(1, 1024),
    "--enable-flash-late-interaction": _ON, "--reasoning-parser": Name(),
    "--log-level": OneOf(("CRITICAL", "ERROR", "WARNING", "INFO")), "--aggregate-engine-logging": _ON,
    # The model as the catalog names it, read without code or paths of the tenant's choosing.
    "--runner": _parser_choices("--runner"), "--convert": _parser_choices("--convert"),
    "--tokenizer-mode": OneOf(("auto", "hf", "slow", "mistral")), "--dtype": _parser_choices("--dtype"),
    "--seed": _INT, "--config-format": OneOf(("auto", "hf", "mistral")),
    "--generation-config": OneOf(("auto", "vllm")), "--override-generation-config": _SAMPLING,
    "--model-impl": OneOf(("auto", "vllm", "transformers")), "--renderer-num-workers": Num(1, 16),
    "--load-format": OneOf(("auto", "safetensors", "dummy", "gguf", "bitsandbytes", "mistral")),
    "--safetensors-load-strategy": _parser_choices("--safetensors-load-strategy"),
    "--safetensors-prefetch-num-threads": Num(1, 64), "--safetensors-prefetch-block-size": Num(4096, 2**30),
    "--ignore-patterns": ListOf(_TEXT, 64), "--use-tqdm-on-load": _ON, "--allow-deprecated-quantization": _ON,
    "--enforce-eager": _ON, "--enable-return-routed-experts": _ON, "--return-sampling-mask": _ON,
    "--max-logprobs": Num(0, 1024), "--logprobs-mode": _parser_choices("--logprobs-mode"),
    "--use-fp64-gumbel": _ON, "--disable-sliding-window": _ON, "--disable-cascade-attn": _ON,
    "--skip-tokenizer-init": _ON, "--language-model-only": _ON,
    "--show-hidden-metrics-for-version": Name(r"\d+\.\d+"),
    # Kernels and backends, chosen among vLLM's own.
    "--attention-backend": Name(), "--mamba-backend": Name(), "--mm-encoder-attn-backend": Name(),
    "--mamba-ssu-algorithm": _parser_choices("--mamba-ssu-algorithm"),
    "--enable-mamba-cache-stochastic-rounding": _ON,
    "--mamba-cache-philox-rounds": Num(0, 64), "--all2all-backend": _parser_choices("--all2all-backend"),
    "--moe-backend": _parser_choices("--moe-backend"), "--linear-backend": _parser_choices("--linear-backend"),
    "--sparse-indexer-topk-backend": _parser_choices("--sparse-indexer-topk-backend"),
    "--gdn-prefill-backend": _parser_choices("--gdn-prefill-backend"),
    "--kda-prefill-backend": _parser_choices("--kda-prefill-backend"),
    "--kda-decode-backend": _parser_choices("--kda-decode-backend"), "--enable-flashinfer-autotune": _ON,
    "--compilation-config": _COMPILATION, "--optimization-level": OneOf(("0", "1", "2", "3")),
    "--performance-mode": _parser_choices("--performance-mode"), "--structured-outputs-config": _STRUCTURED,
    "--cudagraph-capture-sizes": _SIZES, "--max-cudagraph-capture-size": Num(1, 8192),
    "--disable-custom-all-reduce": _ON, "--max-parallel-loading-workers": Num(1, 16),
    "--distributed-timeout-seconds": Num(1, 3600), "--cpu-distributed-timeout-seconds": Num(1, 3600),
    "--fail-on-environ-validation": _ON, "--shutdown-timeout": Num(0, 300),
    # Experts, batching and scheduling inside the engine's own GPUs.
    "--enable-expert-parallel": _ON, "--enable-batch-sharded-sampling": _ON, "--enable-ep-weight-filter": _ON,
    "--enable-dbo": _ON, "--ubatch-size": Num(0, 1024), "--dbo-decode-token-threshold": Num(0, 65536),
    "--dbo-prefill-token-threshold": Num(0, 65536), "--dp-sync-interval": Num(1, 1024),
    "--disable-nccl-for-dp-synchronization": _ON, "--enable-eplb": _ON,
    "--expert-placement-strategy": _parser_choices("--expert-placement-strategy"),
    "--max-num-scheduled-tokens": Num(1, MAX_NUM_BATCHED_TOKENS), "--max-num-active-seqs": Num(1, MAX_NUM_SEQS),
    "--max-num-queued-reqs": Num(1, 100_000), "--max-num-queued-tokens": Num(1, 100_000_000),
    "--long-prefill-token-threshold": Num(0, MAX_NUM_BATCHED_TOKENS), "--long-prefill-token-threshold-adaptive": _ON,
    "--scheduling-policy": _parser_choices("--scheduling-policy"), "--disable-chunked-mm-input": _ON,
    "--scheduler-reserve-full-isl": _ON, "--watermark": Num(0, 1, integer=False),
    "--prefill-schedule-interval": Num(1, 1024), "--disable-hybrid-kv-cache-manager": _ON,
    "--async-scheduling": _ON, "--stream-interval": Num(1, 1024),
    # The KV cache inside the GPU memory the product gives the engine.
    "--block-size": OneOf((1, 8, 16, 32, 64, 128, 256)), "--num-gpu-blocks-override": Num(1, 10_000_000),
    "--prefix-caching-hash-algo": _parser_choices("--prefix-caching-hash-algo"),
    "--prefix-cache-retention-interval": Num(0, 86_400), "--kv-cache-dtype-skip-layers": _NAMES,
    "--kv-sharing-fast-prefill": _ON, "--swa-bounded-replay": _ON,
    "--mamba-cache-dtype": _parser_choices("--mamba-cache-dtype"),
    "--mamba-ssm-cache-dtype": _parser_choices("--mamba-ssm-cache-dtype"), "--mamba-block-size": Num(1, 65536),
    "--prefix-match-unit": Num(1, 65536), "--mamba-cache-mode": _parser_choices("--mamba-cache-mode"),
    "--enable-mamba-shared-prefix-checkpoint": _ON, "--replayssm-buffer-len": Num(1, 1024), "--use-replayssm": _ON,
    "--kv-cache-metrics": _ON, "--kv-cache-metrics-sample": Num(0, 1, integer=False), "--cudagraph-metrics": _ON,
    "--enable-mfu-metrics": _ON, "--jit-monitor-mode": _parser_choices("--jit-monitor-mode"),
    "--jit-monitor-verbose": _ON, "--per-request-spec-decode-metrics": OneOf(("none", "summary")),
    # Host memory no pod request accounts for (the engine container asks 16 GiB per GPU, kv_offload adds its
    # tier): weights offloaded and multimodal caches stay well inside it, per GPU.
    "--cpu-offload-gb": Num(0, 8, integer=False), "--offload-backend": _parser_choices("--offload-backend"),
    "--cpu-offload-params": _NAMES, "--offload-group-size": Num(0, 1024), "--offload-num-in-group": Num(1, 1024),
    "--offload-prefetch-step": Num(1, 64), "--offload-params": _NAMES,
    # Multimodal inputs, bounded per prompt and in the host memory their caches take.
    "--limit-mm-per-prompt": Json({"image": Num(0, 64), "video": Num(0, 16), "audio": Num(0, 16)}),
    "--mm-processor-cache-gb": Num(0, 4, integer=False),
    "--mm-processor-cache-type": _parser_choices("--mm-processor-cache-type"),
    "--mm-hasher-algorithm": _parser_choices("--mm-hasher-algorithm"),
    "--mm-shm-cache-max-object-size-mb": Num(1, 1024),
    "--mm-encoder-only": _ON, "--mm-encoder-tp-mode": _parser_choices("--mm-encoder-tp-mode"),
    "--mm-encoder-attn-dtype": _parser_choices("--mm-encoder-attn-dtype"),
    "--mm-encoder-fp8-scale-save-margin": Num(0, 100, integer=False), "--interleave-mm-strings": _ON,
    "--skip-mm-profiling": _ON, "--video-pruning-rate": Num(0, 1, integer=False),
    "--video-pruning-method": _parser_choices("--video-pruning-method"),
    "--mm-tensor-ipc": _parser_choices("--mm-tensor-ipc"),
    "--mm-processor-device": _parser_choices("--mm-processor-device"),
    "--mm-ipc-gpu-memory-gb": Num(0, 16, integer=False), "--mm-device-do-normalize": _ON,
    # LoRA, beyond what the service's adapters render.
    "--lora-dtype": _parser_choices("--lora-dtype"), "--enable-tower-connector-lora": _ON,
    "--max-cpu-loras": Num(1, 16), "--fully-sharded-loras": _ON, "--lora-target-modules": _NAMES,
    "--specialize-active-lora": _ON, "--enable-mixed-moe-lora-format": _ON, "--enable-moe-shared-loras": _ON,
    "--max-lora-cls-labels": Num(1, 65536),
}

_CODE = "it loads Python code into the engine"
_FILE = "it reads a file or path inside the pod"
_JSON = "a JSON configuration with no key the product checks as safe"
_LOGS = "it writes prompts or outputs to the engine's logs"
_TLS = "the engine's own TLS, behind the gateway, is the platform's"
_PARALLEL = "it changes how the engine spreads over GPUs and nodes, which the product sizes pods for"
_TENSORS = "it makes the engine load tensors that requests send"
_OUTSIDE = "it connects the engine to an address outside the product"
_SLEEP = "sleep and wake are the product's"
_CPUS = "it pins the engine to the node's CPUs"
# Flag -> why only staff may set it (a platform-wide Runtime's default args).
PLATFORM: dict[str, str] = {
    "--config": _FILE, "--chat-template": _FILE, "--tokenizer": _FILE, "--hf-config-path": _FILE,
    "--allowed-local-media-path": _FILE, "--download-dir": _FILE, "--log-config-file": _FILE, "--uds": _FILE,
    "--mm-encoder-fp8-scale-path": _FILE, "--mm-encoder-fp8-scale-save-path": _FILE, "--default-mm-loras": _FILE,
    "--ssl-keyfile": _FILE, "--ssl-certfile": _FILE, "--ssl-ca-certs": _FILE,
    "--enable-ssl-refresh": _TLS, "--ssl-cert-reqs": _TLS, "--ssl-ciphers": _TLS,
    "--trust-remote-code": "it runs the model repository's own Python code",
    "--code-revision": "it picks the revision of the model repository's own Python code",
    "--revision": "it loads weights of another revision than the catalog's",
    "--tokenizer-revision": "it loads a tokenizer of another revision than the catalog's",
    "--hf-token": "it is a credential the platform provides",
    "--hf-overrides": "it overrides the model's configuration, its architectures and code references included",
    "--tool-parser-plugin": _CODE, "--reasoning-parser-plugin": _CODE, "--middleware": _CODE,
    "--logits-processors": _CODE, "--io-processor-plugin": _CODE, "--model-class-overrides": _CODE,
    "--model-loader-extra-config": _CODE, "--worker-cls": _CODE, "--worker-extension-cls": _CODE,
    "--scheduler-cls": _CODE, "--distributed-executor-backend": _CODE, "--additional-config": _CODE,
    "--kv-events-config": _CODE, "--ec-transfer-config": _CODE, "--ec-manager-config": _CODE,
    "--pt-load-map-location": "it moves checkpoint tensors to devices it names",
    "--max-log-len": _LOGS, "--enable-log-outputs": _LOGS, "--enable-log-deltas": _LOGS,
    "--enable-log-requests": _LOGS,
    "--log-error-stack": _LOGS, "--enable-logging-iteration-details": _LOGS, "--logging-config": _LOGS,
    "--otlp-traces-endpoint": "it sends traces, request details included, to the address it names",
    "--collect-detailed-traces": "it traces requests in detail for an OTLP endpoint",
    "--tool-server": _OUTSIDE, "--allowed-media-domains": _OUTSIDE,
    "--weight-transfer-config": "it takes weights from somewhere other than the catalog's model",
    "--trust-request-chat-template": "it lets every request bring its own chat template",
    "--trust-request-mm-kwargs": "it lets every request set multimodal processor arguments",
    "--enable-prompt-embeds": _TENSORS, "--enable-mm-embeds": _TENSORS,
    "--quantization-config": _JSON, "--pooler-config": _JSON, "--media-io-kwargs": _JSON,
    "--mm-processor-kwargs": _JSON, "--eplb-config": _JSON, "--attention-config": _JSON, "--kernel-config": _JSON,
    "--ir-op-priority": _JSON, "--engram-config": _JSON, "--reasoning-config": _JSON, "--aux-output-config": _JSON,
    "--watermark-config": _JSON, "--diffusion-config": _JSON, "--fault-tolerance-config": _JSON,
    "--profiler-config": "it writes profiles to a directory it names",
    "--enable-trace-replay": "it records requests for replay", "--ray-workers-use-nsight": "it profiles the workers",
    "--enable-layerwise-nvtx-tracing": "it profiles the model's layers",
    "--disable-log-stats": "it stops the statistics the product's telemetry and autoscaler read",
    "--enable-per-request-metrics": "it changes the metrics the product's telemetry reads",
    "--custom-histogram-buckets": "it changes the histogram buckets the product's telemetry reads",
    "--enable-force-include-usage": "it changes the usage the gateway meters",
    "--tokens-only": "it changes the API the gateway calls", "--allow-credentials": _TLS,
    "--allowed-origins": _TLS, "--allowed-methods": _TLS, "--allowed-headers": _TLS,
    "--enable-sleep-mode": _SLEEP, "--sleep-mode-offload-cudagraph": _SLEEP,
    "--sleep-preserve-parameter-names": _SLEEP, "--enable-cumem-allocator": _SLEEP,
    "--enable-nccl-comm-suspend": _SLEEP, "--enable-shm-tensor-arena": "it uses the node's shared memory",
    "--numa-bind": _CPUS, "--numa-bind-nodes": _CPUS, "--numa-bind-cpus": _CPUS,
    "--device-ids": "the scheduler gives the pod its devices",
    "--enable-fault-tolerance": "the product restarts failed engines",
    "--enable-scale-out": "the control plane decides the replicas", "--enable-elastic-ep": _PARALLEL,
    "--elastic-ep-max-dp-size": _PARALLEL, "--decode-context-parallel-size": _PARALLEL,
    "--prefill-context-parallel-size": _PARALLEL, "--dcp-comm-backend": _PARALLEL, "--dcp-q-replicate": _PARALLEL,
    "--dcp-kv-cache-interleave-size": _PARALLEL, "--cp-kv-cache-interleave-size": _PARALLEL,
    "--enable-hc-sp": _PARALLEL, "--data-parallel-hybrid-lb": _PARALLEL, "--data-parallel-external-lb": _PARALLEL,
    "--data-parallel-multi-port-external-lb": _PARALLEL, "--data-parallel-supervisor-port": _PARALLEL,
    "--dp-supervisor-probe-interval-s": _PARALLEL, "--dp-supervisor-probe-timeout-s": _PARALLEL,
    "--dp-supervisor-probe-failure-threshold": _PARALLEL,
}
# Flag -> why no one may set it: the product's engines speak HTTP at the root path on the port it renders.
REFUSED: dict[str, str] = {
    "--grpc": "it serves gRPC instead of the OpenAI HTTP API the gateway and probes call",
    "--grpc-port": "it opens a port the product does not render",
    "--root-path": "it moves the API away from the paths the gateway and probes call",
}
