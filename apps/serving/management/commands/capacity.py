"""`manage.py capacity`: does a catalog model fit a GPU (KV blocks, token capacity, smallest TP), and
which GPU kind × TP × replicas serves a request rate within a TTFT objective (the sizing advisor).

    python manage.py capacity --model llama-3-1-8b-instruct --gpu l4-24gb --max-model-len 16384
    python manage.py capacity --model meta-llama/Llama-3.1-8B-Instruct --rate 10 --prompt-tokens 512 \
        --output-tokens 128 --ttft-slo 0.5 --json

An unknown model or GPU, or an unusable value, prints a message and exits with status 2.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from apps.catalog.models import Model
from apps.serving.capacity import KV_CACHE_DTYPES, CapacityInputError, describe, find_model, gib, suggest
from capacity.gpus import GPUS

USAGE_ERROR = 2


class Command(BaseCommand):
    help = "Plan a model's capacity on a GPU (--gpu), or size GPUs for a load (--rate ... --ttft-slo)."

    def add_arguments(self, parser):
        parser.add_argument("--model", required=True, help="catalog model name or source id (org/name)")
        parser.add_argument("--gpu", help=f"GPU key: {', '.join(GPUS)}")
        parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
        parser.add_argument("--kv-cache-dtype", default="auto", help=f"{' or '.join(KV_CACHE_DTYPES)} (default auto)")
        parser.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="default 0.9")
        parser.add_argument("--max-model-len", type=int, default=None, help="default: the model's context")
        parser.add_argument("--cpu-tier-gib", type=float, default=None,
                            help="a KV-cache CPU tier of this many GiB per GPU (vLLM offloading)")
        parser.add_argument("--rate", type=float, help="sizing: requests per second")
        parser.add_argument("--prompt-tokens", type=int, help="sizing: prompt tokens per request")
        parser.add_argument("--output-tokens", type=int, help="sizing: output tokens per request")
        parser.add_argument("--ttft-slo", type=float, help="sizing: time-to-first-token objective (p95), seconds")
        parser.add_argument("--gpus", help="sizing: only these GPU keys, comma-separated (default: every kind)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args, **opts):
        try:
            model = find_model(Model.objects.all(), opts["model"])
        except LookupError as exc:
            raise CommandError(str(exc), returncode=USAGE_ERROR) from exc
        sizing = [opts[k] for k in ("rate", "prompt_tokens", "output_tokens", "ttft_slo")]
        try:
            if any(v is not None for v in sizing):
                if None in sizing:
                    raise CommandError("sizing needs all of --rate, --prompt-tokens, --output-tokens and --ttft-slo",
                                       returncode=USAGE_ERROR)
                self._advise(model, opts)
            elif not opts["gpu"]:
                raise CommandError("give --gpu GPU_KEY (or --rate ... for the sizing advisor)", returncode=USAGE_ERROR)
            else:
                self._describe(model, opts)
        except CapacityInputError as exc:
            reasons = "; ".join(f"--{name.replace('_', '-')}: {reason}" for name, reason in exc.errors.items())
            reasons = reasons.replace("--gpu-types", "--gpus").replace("--gpu-type:", "--gpu:")
            raise CommandError(reasons, returncode=USAGE_ERROR) from exc

    def _describe(self, model, opts) -> None:
        result = describe(model, opts["gpu"], tp=opts["tp"], kv_cache_dtype=opts["kv_cache_dtype"],
                          gpu_memory_utilization=opts["gpu_memory_utilization"], max_model_len=opts["max_model_len"],
                          cpu_tier_gib=opts["cpu_tier_gib"])
        if opts["json"]:
            self.stdout.write(json.dumps(result))
            return
        gpu = GPUS[result["gpu"]]
        max_len = opts["max_model_len"] or model.max_context
        rows = [
            ("weights per GPU", gib(result["weights_bytes"])),
            ("KV bytes per token (per GPU)", f"{result['kv_bytes_per_token']:,}"),
            ("block bytes (16 tokens)", f"{result['block_bytes']:,}"),
            ("KV budget per GPU", gib(result["kv_budget_bytes"])),
            ("blocks (num_gpu_blocks)", f"{result['num_blocks']:,}"),
            ("token capacity", f"{result['max_tokens']:,}"),
            *([(f"CPU tier tokens ({opts['cpu_tier_gib']:g} GiB per GPU)", f"{result['cpu_tier_tokens']:,}"),
               ("CPU tier block load (host link)", f"{result['cpu_tier_block_load_us']} µs")]
              if opts["cpu_tier_gib"] else []),
            (f"concurrent at {max_len:,} tokens", f"{result['max_concurrent_at_context']}"),
            ("fits", "yes" if result["fits"] else f"no: {result['reason']}"),
            ("smallest TP on one node", str(result["min_tp"]) if result["min_tp"] else "none: multi-node needed"),
        ]
        self.stdout.write(
            f"{model.name} on {result['tp']} × {gpu.label} (TP {result['tp']}), kv_cache_dtype "
            f"{opts['kv_cache_dtype']}, gpu_memory_utilization {opts['gpu_memory_utilization']}, "
            f"max_model_len {max_len}"
        )
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            self.stdout.write(f"  {label.ljust(width)}  {value}")

    def _advise(self, model, opts) -> None:
        offered = [key.strip() for key in opts["gpus"].split(",") if key.strip()] if opts["gpus"] else None
        options = suggest(model, opts["rate"], opts["prompt_tokens"], opts["output_tokens"], opts["ttft_slo"],
                          kv_cache_dtype=opts["kv_cache_dtype"], gpu_memory_utilization=opts["gpu_memory_utilization"],
                          gpu_types=offered)
        if opts["json"]:
            self.stdout.write(json.dumps({"model": model.name, "suggestions": options}))
            return
        self.stdout.write(
            f"{model.name}: {opts['rate']} req/s × ({opts['prompt_tokens']} prompt + {opts['output_tokens']} output "
            f"tokens), TTFT p95 ≤ {opts['ttft_slo']} s"
        )
        if not options:
            self.stdout.write("  no single-node option meets this load within the objective")
            return
        header = ("GPU", "TP", "replicas", "GPUs", "GPU-h/Mtok", "TTFT p95 (s)", "max_model_len")
        rows = [(o["gpu"], o["tp"], o["replicas"], o["gpus"], o["gpu_hours_per_million_tokens"], o["ttft_p95_s"],
                 o["max_model_len"]) for o in options]
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            self.stdout.write(("  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True))).rstrip())
