"""Engine settings and one adapter per inference engine (vLLM, SGLang).

A service stores its engine settings as structured JSON (`EngineSettings`). The adapters know each
engine's exact flag names (enginevocab: vLLM 0.32.0's own parser, SGLang 0.5.23), which values the engine
accepts, which flags a structured setting owns, and which HTTP endpoints answer health and readiness.
Model validation (`clean()`) calls `validate`; the manifest renderer calls `flags`. Pure: no Django.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from apps.catalog import kvoffload
from apps.catalog.kvoffload import KvOffload
from enginevocab import policy, sglang, vllm
from enginevocab.bounds import MAX_NUM_BATCHED_TOKENS, MAX_NUM_SEQS


class EngineSettingsError(ValueError):
    """Engine settings that cannot be read; `errors` maps a field name to the reason."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{name}: {reason}" for name, reason in errors.items()))
        self.errors = errors


# Field name -> (accepted Python types, a word for the error message).
_FIELD_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "max_model_len": ((int,), "an integer"),
    "kv_cache_dtype": ((str,), "a string"),
    "enable_prefix_caching": ((bool,), "true or false"),
    "enable_chunked_prefill": ((bool,), "true or false"),
    "gpu_memory_utilization": ((int, float), "a number"),
    "max_num_seqs": ((int,), "an integer"),
    "max_num_batched_tokens": ((int,), "an integer"),
    "tensor_parallel_size": ((int,), "an integer"),
    "pipeline_parallel_size": ((int,), "an integer"),
    "quantization": ((str,), "a string"),
    "speculative_method": ((str,), "a string"),
    "speculative_model": ((str,), "a string"),
    "num_speculative_tokens": ((int,), "an integer"),
    "extra_args": ((list,), "a list of strings"),
    "kv_offload": ((dict,), 'an object {"backend": "native" | "lmcache" | "hicache", "size_gib": N}'),
}


@dataclass(frozen=True)
class EngineSettings:
    """The engine knobs a service may set; None means "the engine's default"."""

    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None  # a step's token budget (vLLM); SGLang's prefill chunk size
    tensor_parallel_size: int | None = None  # None: from the replica's GPUs (capacity.parallel)
    pipeline_parallel_size: int = 1
    quantization: str | None = None
    speculative_method: str | None = None  # "ngram" or "draft_model" (None: a draft model when one is named)
    speculative_model: str | None = None
    num_speculative_tokens: int | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    kv_offload: KvOffload | None = None  # the CPU tier of the KV cache (apps/catalog/kvoffload.py); None: off

    def __post_init__(self):
        # Accept a list from callers but keep the frozen value hashable and comparable.
        object.__setattr__(self, "extra_args", tuple(self.extra_args))

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> EngineSettings:
        """Read stored settings; unknown keys and wrong types raise EngineSettingsError per field."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise EngineSettingsError({"__all__": "engine settings must be an object"})
        errors: dict[str, str] = {}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in _FIELD_TYPES:
                errors[key] = f"unknown engine setting {key!r}"
                continue
            if value is None:
                if key in ("tensor_parallel_size", "pipeline_parallel_size"):
                    errors[key] = "must be an integer"
                elif key != "extra_args":
                    values[key] = None
                continue
            types, word = _FIELD_TYPES[key]
            # bool is an int subclass in Python; a JSON true is not a sequence count.
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                errors[key] = f"must be {word}"
                continue
            if key == "extra_args":
                if not all(isinstance(item, str) for item in value):
                    errors[key] = "must be a list of strings"
                    continue
                value = tuple(value)
            if key == "kv_offload":
                try:
                    value = kvoffload.parse(value)
                except ValueError as bad:
                    errors[key] = str(bad)
                    continue
            if key == "gpu_memory_utilization":
                value = float(value)
            values[key] = value
        if errors:
            raise EngineSettingsError(errors)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; settings left to the engine default are omitted."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra_args":
                if value:
                    out[f.name] = list(value)
            elif f.name == "kv_offload":
                if value is not None:
                    out[f.name] = value.to_dict()
            elif value is not None:
                out[f.name] = value
        return out


@dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter as the engine sees it: the name clients request and its path in the pod (None: loaded at
    run time, not at start)."""

    name: str
    path: str | None
    rank: int | None = None


SPECULATIVE_METHODS = ("ngram", "draft_model")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
# Flags the control plane renders itself (not engine settings): a service may not override them.
_CONTROL_PLANE = "__control_plane__"


class EngineAdapter:
    """What the control plane needs to know about one engine. Subclasses fill the tables."""

    kind: ClassVar[str]
    port: ClassVar[int]
    health_path: ClassVar[str]  # liveness
    readiness_path: ClassVar[str]
    startup_path: ClassVar[str]
    metrics_path: ClassVar[str] = "/metrics"
    # The uid the engine container runs as, or None where the image needs root (see docs/security.md).
    non_root_uid: ClassVar[int | None] = None
    command: ClassVar[tuple[str, ...]]
    kv_cache_dtypes: ClassVar[tuple[str, ...]]
    # Flag spelling -> owning EngineSettings field (or _CONTROL_PLANE), aliases included.
    _owned: ClassVar[dict[str, str]]

    def owned_flags(self) -> dict[str, str]:
        """Every flag spelling a structured setting or the control plane owns -> the owner's name."""
        return dict(self._owned)

    def validate(self, settings: EngineSettings, *, max_context: int | None = None,
                 tag: str | None = None) -> dict[str, str]:
        """Field errors for settings this engine would reject (or that would fight the control plane);
        `tag` is the runtime's image tag, whose engine version decides which flags exist."""
        errors: dict[str, str] = {}
        s = settings
        if s.max_model_len is not None:
            if s.max_model_len < 1:
                errors["max_model_len"] = "must be at least 1"
            elif max_context is not None and s.max_model_len > max_context:
                errors["max_model_len"] = f"exceeds the model's maximum context of {max_context} tokens"
        if s.kv_cache_dtype is not None and s.kv_cache_dtype not in self.kv_cache_dtypes:
            errors["kv_cache_dtype"] = (
                f"{s.kv_cache_dtype!r} is not a KV-cache dtype {self.kind} accepts "
                f"({', '.join(self.kv_cache_dtypes)})"
            )
        gmu = s.gpu_memory_utilization
        if gmu is not None and (math.isnan(gmu) or not 0 < gmu <= 1):
            errors["gpu_memory_utilization"] = "must be greater than 0 and at most 1"
        if s.max_num_seqs is not None and not 1 <= s.max_num_seqs <= MAX_NUM_SEQS:
            errors["max_num_seqs"] = f"must be between 1 and {MAX_NUM_SEQS}"
        batched = self._batched_tokens_error(s)
        if batched:
            errors["max_num_batched_tokens"] = batched
        for name in ("tensor_parallel_size", "pipeline_parallel_size"):
            if getattr(s, name) is not None and getattr(s, name) < 1:
                errors[name] = "must be at least 1"
        if s.quantization is not None and not _NAME_RE.match(s.quantization):
            errors["quantization"] = "must be a quantization method name such as awq, gptq or fp8"
        errors.update(self._speculative_errors(s))
        if s.kv_offload is not None:
            refused = kvoffload.engine_error(s.kv_offload, self.kind, prefix_caching=s.enable_prefix_caching)
            if refused:
                errors["kv_offload"] = refused
        extra = self._validate_extra_args(s.extra_args, tag=tag)
        if extra:
            errors["extra_args"] = extra
        if not errors:
            errors.update(self._settings_at_version(s, tag))
        return errors

    def _speculative_errors(self, s: EngineSettings) -> dict[str, str]:
        """Speculative decoding: n-gram drafting from the prompt (no model, so no code a tenant brings), or a
        draft model; either with its number of speculative tokens."""
        method, model, tokens = s.speculative_method, s.speculative_model, s.num_speculative_tokens
        if method is not None and method not in SPECULATIVE_METHODS:
            return {"speculative_method": f"must be one of {', '.join(SPECULATIVE_METHODS)}"}
        if tokens is not None and not 1 <= tokens <= 16:
            return {"num_speculative_tokens": "must be between 1 and 16"}
        if method == "ngram":
            return ({"speculative_model": "must be unset with the ngram method, which drafts from the prompt"}
                    if model is not None else {"num_speculative_tokens": "is required with speculative_method ngram"}
                    if tokens is None else {})
        if model is None and (tokens is not None or method == "draft_model"):
            return {"speculative_model": "is required when num_speculative_tokens is set"}
        if model is not None and not model.strip():
            return {"speculative_model": "must not be blank"}
        if model is not None and tokens is None:
            return {"num_speculative_tokens": "is required when speculative_model is set"}
        return {}

    def _batched_tokens_error(self, s: EngineSettings) -> str | None:
        """Why the engine refuses this batched-token budget (with the settings beside it), or None."""
        n = s.max_num_batched_tokens
        if n is None:
            return None
        if not 1 <= n <= MAX_NUM_BATCHED_TOKENS:
            return f"must be between 1 and {MAX_NUM_BATCHED_TOKENS}"
        if s.max_num_seqs is not None and n < s.max_num_seqs:
            # vLLM's scheduler config: every running sequence must fit one decode token in a step.
            return f"must be at least max_num_seqs ({s.max_num_seqs})"
        if s.enable_chunked_prefill is False and s.max_model_len is not None and n < s.max_model_len:
            # Without chunking a whole prompt is one step's tokens: a shorter budget refuses long prompts.
            return f"must be at least max_model_len ({s.max_model_len}) without chunked prefill"
        return None

    def _settings_at_version(self, settings: EngineSettings, tag: str | None) -> dict[str, str]:
        """The setting whose rendered flag the runtime's version lacks, as the renderer would refuse it."""
        try:
            self.flags(replace(settings, extra_args=()), model_path="model", served_name="model", tag=tag)
        except ValueError as refused:
            flag = str(refused).split(" ", 1)[0]
            setting = policy.VOCABULARIES[self.kind].owner.get(flag) or "runtime"
            return {setting: str(refused)}
        return {}

    def _validate_extra_args(self, args: tuple[str, ...], *, staff: bool = False, tag: str | None = None) -> str | None:
        return "; ".join(policy.check_args(self.kind, args, staff=staff, tag=tag)) or None

    def validate_default_args(self, args: list[str] | tuple[str, ...], tag: str | None = None) -> str | None:
        """Problems with a Runtime's default args, which staff set: platform-only flags are allowed."""
        return self._validate_extra_args(tuple(args), staff=True, tag=tag)

    def for_version(self, args: list[str], tag: str | None) -> list[str]:
        """`args` as rendered, refused (ValueError naming the version) where the version `tag` names lacks
        one of their flags; without a tag, the vocabulary's own version, which has them all. Arguments the
        vocabulary does not know at all are the policy's to judge, not the renderer's."""
        vocab = policy.VOCABULARIES[self.kind]
        version = vocab.at(tag)
        if version == vocab.version:
            return args
        for token in args:
            spelling = token.partition("=")[0]
            if not policy.is_value(token) and policy.resolve(vocab, spelling)[0] is not None:
                flag, why = policy.resolve(vocab, spelling, version)
                if flag is None:  # a flag of the vocabulary's version that the runtime's version lacks
                    raise ValueError(why)
        return args

    def flags(
        self,
        settings: EngineSettings,
        *,
        model_path: str,
        served_name: str,
        port: int | None = None,
        adapters: list[LoraAdapter] | tuple[LoraAdapter, ...] = (),
        role: str | None = None,
        default_args: list[str] | tuple[str, ...] = (),
        multi_node: MultiNode | None = None,
        tag: str | None = None,
    ) -> list[str]:
        """The engine's command-line arguments (after `command`), in a stable order.

        `role` is None, "prefill" or "decode"; `default_args` are the runtime's defaults, placed before
        the service's own extra args so the service wins where the engine takes the last value; `tag` is
        the runtime's image tag: a flag its engine version lacks is refused (`for_version`).
        """
        raise NotImplementedError

    def host_args(self) -> list[str]:
        raise NotImplementedError


@dataclass(frozen=True)
class MultiNode:
    """One pod's place in a multi-node group (LeaderWorkerSet): group size and this pod's rank.

    Values may be `$(VAR)` references that Kubernetes expands from the pod's environment.
    """

    nnodes: str
    node_rank: str
    leader_address: str
    leader_port: int
    is_leader: bool


def _owned(table: dict[str, tuple[str, ...]]) -> dict[str, str]:
    # The vocabulary names the control plane "" (it owns the flag, not a setting).
    return {flag: owner or _CONTROL_PLANE for owner, flags in table.items() for flag in flags}


VLLM_LORA_RANKS = vllm.LORA_RANKS
RUNTIME_LORA_SLOTS = 4  # --max-loras GPU slots for adapters loaded at run time, whatever their number


class VllmAdapter(EngineAdapter):
    """vLLM 0.32 (`vllm serve`): boolean flags come in --x / --no-x pairs."""

    kind = "vllm"
    port = 8000
    # vLLM's image runs as any uid given a writable $HOME (its caches: HF, vLLM, Triton, Inductor).
    non_root_uid = 1000
    health_path = "/health"
    readiness_path = "/health"  # the API server has no separate readiness endpoint
    startup_path = "/health"
    command = ("vllm", "serve")
    # vLLM's cache dtype choices (engines.md lists auto, fp8, fp8_e5m2, nvfp4 among them).
    kv_cache_dtypes = vllm.KV_CACHE_DTYPES
    _owned = _owned(vllm.OWNED)

    def host_args(self) -> list[str]:
        return ["--host", "0.0.0.0"]

    def flags(self, settings, *, model_path, served_name, port=None, adapters=(), role=None,
              default_args=(), multi_node=None, parallelism=None, tag=None):
        s = settings
        args = ["--model", model_path, "--served-model-name", served_name,
                *self.host_args(), "--port", str(port or self.port)]
        tp, dp = (parallelism.tp, parallelism.dp) if parallelism else (s.tensor_parallel_size or 1, 1)
        if tp != 1:
            args += ["--tensor-parallel-size", str(tp)]
        if dp != 1:
            args += ["--data-parallel-size", str(dp)]
        if s.pipeline_parallel_size != 1:
            args += ["--pipeline-parallel-size", str(s.pipeline_parallel_size)]
        if s.max_model_len is not None:
            args += ["--max-model-len", str(s.max_model_len)]
        if s.kv_cache_dtype is not None:
            args += ["--kv-cache-dtype", s.kv_cache_dtype]
        if s.enable_prefix_caching is not None:
            args.append("--enable-prefix-caching" if s.enable_prefix_caching
                        else "--no-enable-prefix-caching")
        if s.enable_chunked_prefill is not None:
            args.append("--enable-chunked-prefill" if s.enable_chunked_prefill
                        else "--no-enable-chunked-prefill")
        if s.gpu_memory_utilization is not None:
            args += ["--gpu-memory-utilization", _num(s.gpu_memory_utilization)]
        if s.max_num_seqs is not None:
            args += ["--max-num-seqs", str(s.max_num_seqs)]
        if s.max_num_batched_tokens is not None:
            args += ["--max-num-batched-tokens", str(s.max_num_batched_tokens)]
        if s.quantization is not None:
            args += ["--quantization", s.quantization]
        if s.speculative_method == "ngram":
            args += ["--speculative-config", _json({"method": "ngram",
                                                    "num_speculative_tokens": s.num_speculative_tokens})]
        elif s.speculative_model is not None:
            spec = {"method": "draft_model", "model": s.speculative_model,
                    "num_speculative_tokens": s.num_speculative_tokens}
            args += ["--speculative-config", _json(spec)]
        if s.kv_offload is not None:
            args += kvoffload.vllm_args(s.kv_offload, tp=tp, pp=s.pipeline_parallel_size)
        if adapters:  # an adapter without a path is loaded at run time (workers.adaptersync): slots, no module
            rank, start = max((a.rank or 16) for a in adapters), [a for a in adapters if a.path]
            args += ["--enable-lora", *(["--lora-modules", *(f"{a.name}={a.path}" for a in start)] if start else []),
                     "--max-lora-rank", str(next(r for r in VLLM_LORA_RANKS if r >= rank)
                                            if rank <= VLLM_LORA_RANKS[-1] else rank),
                     "--max-loras", str(len(start) + (RUNTIME_LORA_SLOTS if len(start) < len(adapters) else 0))]
        if role is not None:
            if role not in ("prefill", "decode"):
                raise ValueError(f"unknown disaggregation role {role!r}")
            kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
            args += ["--kv-transfer-config", _json({"kv_connector": "NixlConnector", "kv_role": kv_role})]
        if multi_node is not None:
            args += ["--nnodes", multi_node.nnodes, "--node-rank", multi_node.node_rank,
                     "--master-addr", multi_node.leader_address,
                     "--master-port", str(multi_node.leader_port)]
            if not multi_node.is_leader:
                args.append("--headless")
        return self.for_version([*args, *default_args, *s.extra_args], tag)


class SglangAdapter(EngineAdapter):
    """SGLang 0.5.23 (`python3 -m sglang.launch_server`): boolean flags are plain switches."""

    kind = "sglang"
    port = 30000
    bootstrap_port = 8998
    health_path = "/health"
    readiness_path = "/ready"
    startup_path = "/health"  # 503 while the model loads
    command = ("python3", "-m", "sglang.launch_server")
    kv_cache_dtypes = sglang.KV_CACHE_DTYPES
    _owned = _owned(sglang.OWNED)

    def _speculative_errors(self, s: EngineSettings) -> dict[str, str]:
        if s.speculative_method == "ngram":
            return {"speculative_method": "ngram is rendered for vLLM only; SGLang takes a draft model"}
        return super()._speculative_errors(s)

    def _batched_tokens_error(self, s: EngineSettings) -> str | None:
        if s.max_num_batched_tokens is not None and s.enable_chunked_prefill is False:
            # Both render --chunked-prefill-size: -1 turns chunking off, a number is the chunk.
            return "is SGLang's --chunked-prefill-size, the chunk of a chunked prefill; leave it unset with " \
                   "chunked prefill off"
        return super()._batched_tokens_error(s)

    def host_args(self) -> list[str]:
        # SGLang listens on 127.0.0.1 by default, unreachable from other pods.
        return ["--host", "0.0.0.0"]

    def flags(self, settings, *, model_path, served_name, port=None, adapters=(), role=None,
              default_args=(), multi_node=None, parallelism=None, tag=None):
        s = settings
        args = ["--model-path", model_path, "--served-model-name", served_name,
                *self.host_args(), "--port", str(port or self.port), "--enable-metrics"]
        tp = parallelism.tp if parallelism else s.tensor_parallel_size or 1
        if tp != 1:
            args += ["--tp-size", str(tp)]
        if s.pipeline_parallel_size != 1:
            args += ["--pp-size", str(s.pipeline_parallel_size)]
        if s.max_model_len is not None:
            args += ["--context-length", str(s.max_model_len)]
        if s.kv_cache_dtype is not None:
            args += ["--kv-cache-dtype", s.kv_cache_dtype]
        if s.enable_prefix_caching is False:
            args.append("--disable-radix-cache")
        if s.enable_chunked_prefill is False:
            args += ["--chunked-prefill-size", "-1"]
        if s.gpu_memory_utilization is not None:
            args += ["--mem-fraction-static", _num(s.gpu_memory_utilization)]
        if s.max_num_seqs is not None:
            args += ["--max-running-requests", str(s.max_num_seqs)]
        if s.max_num_batched_tokens is not None:
            args += ["--chunked-prefill-size", str(s.max_num_batched_tokens)]
        if s.quantization is not None:
            args += ["--quantization", s.quantization]
        if s.speculative_model is not None:
            steps = s.num_speculative_tokens or 1
            # A draft model with top-k 1 proposes a chain: steps draft tokens plus the verified root.
            args += ["--speculative-algorithm", "STANDALONE",
                     "--speculative-draft-model-path", s.speculative_model,
                     "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(steps + 1)]
        if s.kv_offload is not None:
            args += kvoffload.sglang_args(s.kv_offload)
        if adapters:
            args += ["--enable-lora", "--lora-paths", *(f"{a.name}={a.path}" for a in adapters)]
        if role is not None:
            if role not in ("prefill", "decode"):
                raise ValueError(f"unknown disaggregation role {role!r}")
            args += ["--disaggregation-mode", role]
            if role == "prefill":
                args += ["--disaggregation-bootstrap-port", str(self.bootstrap_port)]
        if multi_node is not None:
            args += ["--dist-init-addr", f"{multi_node.leader_address}:{multi_node.leader_port}",
                     "--nnodes", multi_node.nnodes, "--node-rank", multi_node.node_rank]
        return self.for_version([*args, *default_args, *s.extra_args], tag)


def _num(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{value:.1f}"


def _json(value: dict) -> str:
    return json.dumps(value, separators=(",", ":"))


_ADAPTERS: dict[str, EngineAdapter] = {"vllm": VllmAdapter(), "sglang": SglangAdapter()}
ENGINE_KINDS = tuple(_ADAPTERS)


def get_adapter(engine_kind: str) -> EngineAdapter:
    """The adapter for an engine kind ("vllm" or "sglang"); an unknown kind raises ValueError."""
    try:
        return _ADAPTERS[engine_kind]
    except KeyError:
        expected = ", ".join(ENGINE_KINDS)
        raise ValueError(f"unknown engine {engine_kind!r}; expected one of {expected}") from None
