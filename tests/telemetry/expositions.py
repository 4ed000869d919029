"""Hand-written vLLM 0.33 and SGLang 0.5 expositions, shaped as engines.md describes them.

Each builder takes cumulative bucket counts only where they change (`{upper bound: count}`); every
other bucket of the engine's real bucket list carries the count of the bucket below it, as an engine
writes it. Label order and the `_created` gauges follow what prometheus_client emits.
"""

from __future__ import annotations

import math

VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
             20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
VLLM_ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
            40.0, 80.0]  # fmt: skip
SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
               200.0, 400.0]  # fmt: skip
SGLANG_ITL = [0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
              0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0]  # fmt: skip
VLLM_LAT = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
            480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
# vLLM's token-count histograms: the 1-2-5 series up to max_model_len (8,192 here).
PROMPT_TOKENS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
SGLANG_QUEUE = [0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0,
                40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0,
                900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0]  # fmt: skip


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(float(bound))


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def histogram(name, bounds, counts, labels, created=1.7e9, total_sum=0.0):
    """Lines of one histogram series; `counts` maps some bounds (math.inf for +Inf) to cumulative counts."""
    lines, running = [], 0.0
    for bound in [*bounds, math.inf]:
        running = counts.get(bound, running)
        lines.append(f"{name}_bucket{_labels({**labels, 'le': _le(bound)})} {running}")
    lines.append(f"{name}_count{_labels(labels)} {running}")
    lines.append(f"{name}_sum{_labels(labels)} {total_sum}")
    lines.append(f"# HELP {name}_created histogram created")
    lines.append(f"# TYPE {name}_created gauge")
    lines.append(f"{name}_created{_labels(labels)} {created}")
    return lines


def family(name, kind, series_lines):
    header = name + ("_total" if kind == "counter" else "")
    return [f"# HELP {header} {name}.", f"# TYPE {header} {kind}", *series_lines]


def counter(name, series, created=1.7e9):
    """A counter family; `series` is a list of (labels, value)."""
    lines = family(name, "counter", [f"{name}_total{_labels(labels)} {value}" for labels, value in series])
    lines += [f"# HELP {name}_created counter created", f"# TYPE {name}_created gauge"]
    lines += [f"{name}_created{_labels(labels)} {created}" for labels, _ in series]
    return lines


def gauge(name, series):
    return family(name, "gauge", [f"{name}{_labels(labels)} {value}" for labels, value in series])


def vllm(
    *,
    model="meta-llama/Llama-3.1-8B-Instruct",
    ttft=None,
    itl=None,
    prompt_tokens=0.0,
    generation_tokens=0.0,
    prefix_hits=0.0,
    prefix_queries=0.0,
    preemptions=0.0,
    success=None,
    running=0.0,
    waiting=0.0,
    kv=0.0,
    created=1.7e9,
    engines=("0",),
    queue=None,
    prompt_lengths=None,
    prompt_sum=0.0,
):
    """A vLLM exposition; per-engine values are the same for every DP engine listed in `engines`."""
    lines = [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 1234.0',
    ]
    per = [{"engine": e, "model_name": model} for e in engines]
    lines += gauge("vllm:num_requests_running", [(lb, running) for lb in per])
    lines += gauge("vllm:num_requests_waiting", [(lb, waiting) for lb in per])
    lines += gauge("vllm:kv_cache_usage_perc", [(lb, kv) for lb in per])
    lines += gauge(
        "vllm:cache_config_info",
        [({"block_size": "16", "cache_dtype": "auto", "engine": e, "num_gpu_blocks": "27000"}, 1.0) for e in engines],
    )
    lines += counter("vllm:prefix_cache_queries", [(lb, prefix_queries) for lb in per], created)
    lines += counter("vllm:prefix_cache_hits", [(lb, prefix_hits) for lb in per], created)
    lines += counter("vllm:num_preemptions", [(lb, preemptions) for lb in per], created)
    lines += counter("vllm:prompt_tokens", [(lb, prompt_tokens) for lb in per], created)
    lines += counter("vllm:generation_tokens", [(lb, generation_tokens) for lb in per], created)
    success = success or {}
    lines += counter(
        "vllm:request_success",
        [
            ({**lb, "finished_reason": reason}, success.get(reason, 0.0))
            for lb in per
            for reason in ("stop", "length", "abort", "error", "repetition")
        ],
        created,
    )
    for name, bounds, counts, total in (
        ("vllm:time_to_first_token_seconds", VLLM_TTFT, ttft or {}, 0.0),
        ("vllm:inter_token_latency_seconds", VLLM_ITL, itl or {}, 0.0),
        ("vllm:request_queue_time_seconds", VLLM_LAT, queue or {}, 0.0),
        ("vllm:request_prompt_tokens", PROMPT_TOKENS, prompt_lengths or {}, prompt_sum),
    ):
        series = []
        for lb in per:
            series += histogram(name, bounds, counts, lb, created, total)
        lines += family(name, "histogram", series)
    lines += [
        "# HELP http_requests_total Total number of requests by method, status and handler.",
        "# TYPE http_requests_total counter",
        'http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 42.0',
    ]
    return "\n".join(lines) + "\n"


def sglang(
    *,
    model="Qwen/Qwen2.5-7B-Instruct",
    ttft=None,
    itl=None,
    prompt_tokens=0.0,
    generation_tokens=0.0,
    effective=None,
    requests=0.0,
    aborted=0.0,
    running=0.0,
    queued=0.0,
    token_usage=0.0,
    last_batch_hit_rate=0.0,
    created=1.7e9,
    queue=None,
):
    """An SGLang exposition from the attn-TP-rank-0 scheduler and the tokenizer manager."""
    sched = {
        "engine_type": "unified",
        "model_name": model,
        "moe_ep_rank": "0",
        "pp_rank": "0",
        "tp_rank": "0",
    }
    tok = {"engine_type": "unified", "model_name": model}
    lines = []
    lines += gauge("sglang:num_running_reqs", [(sched, running)])
    lines += gauge("sglang:num_queue_reqs", [(sched, queued)])
    lines += gauge("sglang:token_usage", [(sched, token_usage)])
    lines += gauge("sglang:full_token_usage", [(sched, token_usage)])
    lines += gauge("sglang:cache_hit_rate", [(sched, last_batch_hit_rate)])
    lines += gauge("sglang:gen_throughput", [(sched, 123.4)])
    lines += gauge("sglang:max_total_num_tokens", [(sched, 400000.0)])
    effective = effective or {}
    lines += counter(
        "sglang:prefill_effective_tokens",
        [({**sched, "mode": m}, effective.get(m, 0.0)) for m in ("input", "device_hit", "host_hit", "storage_hit")],
        created,
    )
    for name, value in (
        ("sglang:prompt_tokens", prompt_tokens),
        ("sglang:generation_tokens", generation_tokens),
        ("sglang:num_requests", requests),
    ):
        lines += counter(name, [({**tok, "is_streaming": "true"}, value)], created)
    lines += counter("sglang:num_aborted_requests", [(tok, aborted)], created)
    lines += family(
        "sglang:time_to_first_token_seconds",
        "histogram",
        histogram(
            "sglang:time_to_first_token_seconds",
            SGLANG_TTFT,
            ttft or {},
            {**tok, "is_streaming": "true"},
            created,
        ),
    )
    lines += family(
        "sglang:inter_token_latency_seconds",
        "histogram",
        histogram("sglang:inter_token_latency_seconds", SGLANG_ITL, itl or {}, tok, created),
    )
    lines += family("sglang:queue_time_seconds", "histogram",
                    histogram("sglang:queue_time_seconds", SGLANG_QUEUE, queue or {}, sched, created))
    return "\n".join(lines) + "\n"
