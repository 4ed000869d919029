"""The shape of `GET /api/v1/services/{id}/metrics/` (documentation and schema; the view builds plain dicts)."""

from rest_framework import serializers

from apps.telemetry.series import FIGURE_COLUMNS


def _column(help_text: str) -> serializers.ListField:
    return serializers.ListField(child=serializers.FloatField(allow_null=True), help_text=help_text)


HELP = {
    "ttft_p50": "Time to first token, median, seconds.",
    "ttft_p95": "Time to first token, 95th percentile, seconds.",
    "ttft_p99": "Time to first token, 99th percentile, seconds.",
    "itl_p50": "Inter-token latency, median, seconds.",
    "itl_p95": "Inter-token latency, 95th percentile, seconds.",
    "kv_usage": "KV-cache usage, 0 to 1 (mean over engines).",
    "running": "Requests running (sum over engines).",
    "waiting": "Requests waiting (sum over engines).",
    "prefix_hit_rate": "Share of prompt tokens served from the prefix cache, 0 to 1.",
    "prompt_tps": "Prompt tokens per second.",
    "gen_tps": "Generated tokens per second.",
    "preemptions": "Preemptions in the step (vLLM only).",
    "success_rate": "Share of finished requests that did not abort or fail, 0 to 1.",
    "cpu_hit_rate": "Share of prompt tokens loaded from the KV cache's CPU tier, 0 to 1 (null without a tier).",
    "cpu_usage": "How full the KV cache's CPU tier is, 0 to 1 (null without a tier).",
    "cpu_load_tps": "Tokens copied back from the CPU tier to the GPU per second (null without a tier).",
    "spec_accept_rate": "Speculative decoding: accepted over drafted tokens, 0 to 1 (null without it).",
}


class ServiceMetricsSerializer(serializers.Serializer):
    """Parallel arrays: `time[i]` is the start of the i-th step and every figure's i-th value belongs to it.
    Null where the step had no data (no request got its first token, the engines were not scraped)."""

    service = serializers.IntegerField()
    role = serializers.CharField(help_text='The pool ("prefill", "decode", ...), one revision during a canary '
                                 'rollout ("stable", "canary"), or "" for the whole service.')
    resolution = serializers.ChoiceField(choices=["raw", "minute"], help_text="Which stored rows answered.")
    step = serializers.IntegerField(help_text="Seconds per point.")
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    time = serializers.ListField(child=serializers.DateTimeField())
    ready_replicas = _column("Ready engine replicas.")

    def get_fields(self):
        fields = super().get_fields()
        for column in FIGURE_COLUMNS:
            fields[column] = _column(HELP[column])
        return fields
