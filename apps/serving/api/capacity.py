"""API of the capacity planner: `GET /api/v1/capacity/` (does a model fit a GPU) and
`GET /api/v1/capacity/suggestions/` (the sizing advisor). Thin wrappers over apps.serving.capacity;
the model is looked up among the catalog entries the caller may see."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.catalog.models import Model
from apps.serving.capacity import KV_CACHE_DTYPES, CapacityInputError, describe, find_model, suggest
from capacity.gpus import GPUS


class _Query(serializers.Serializer):
    """Query parameters; any parameter not declared here is refused (400 naming it)."""

    model = serializers.CharField(help_text="Catalog model name or source id, e.g. meta-llama/Llama-3.1-8B-Instruct.")
    kv_cache_dtype = serializers.ChoiceField(choices=KV_CACHE_DTYPES, default="auto")
    gpu_memory_utilization = serializers.FloatField(default=0.9, min_value=0.01, max_value=1.0)

    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields) - {"format"})
        if unknown:
            raise serializers.ValidationError({name: ["Unknown query parameter."] for name in unknown})
        return attrs


class CapacityQuery(_Query):
    gpu_type = serializers.ChoiceField(choices=list(GPUS), help_text="GPU key as kubesim's --nodes takes it.")
    tp = serializers.IntegerField(default=1, min_value=1, max_value=64, help_text="Tensor-parallel size.")
    max_model_len = serializers.IntegerField(required=False, min_value=1, help_text="Default: the model's context.")
    cpu_tier_gib = serializers.FloatField(required=False, min_value=0.01, max_value=1024,
                                          help_text="A KV-cache CPU tier of this many GiB per GPU (vLLM offloading).")


class SuggestionQuery(_Query):
    rate = serializers.FloatField(min_value=0.001, help_text="Requests per second.")
    prompt_tokens = serializers.IntegerField(min_value=1)
    output_tokens = serializers.IntegerField(min_value=1)
    ttft_slo = serializers.FloatField(min_value=0.001, help_text="TTFT objective for the 95th percentile, seconds.")
    gpu_types = serializers.CharField(required=False, help_text="Only these GPU keys, comma-separated.")


class CapacityPlanSerializer(serializers.Serializer):
    """Per-GPU figures as vLLM computes them at start-up (the keys of `manage.py capacity --json`)."""

    model = serializers.CharField()
    gpu = serializers.CharField()
    tp = serializers.IntegerField()
    kv_bytes_per_token = serializers.IntegerField()
    block_bytes = serializers.IntegerField()
    weights_bytes = serializers.IntegerField(help_text="Per GPU.")
    kv_budget_bytes = serializers.IntegerField(help_text="Per GPU.")
    num_blocks = serializers.IntegerField(help_text="Per GPU, as vLLM reports num_gpu_blocks.")
    max_tokens = serializers.IntegerField(help_text="num_blocks × 16.")
    max_concurrent_at_context = serializers.FloatField()
    fits = serializers.BooleanField()
    min_tp = serializers.IntegerField(allow_null=True, help_text="Null when no single node fits.")
    reason = serializers.CharField(allow_blank=True)
    cpu_tier_tokens = serializers.IntegerField(
        help_text="Tokens the CPU tier of cpu_tier_gib per GPU holds (whole 16-token blocks); 0 without one.")
    cpu_tier_block_load_us = serializers.FloatField(
        help_text="Microseconds to load one 16-token block (each GPU's share) from the CPU tier over the GPU's host "
                  "link at its nominal bandwidth; 0 without a tier.")


class SuggestionSerializer(serializers.Serializer):
    gpu = serializers.CharField()
    gpu_label = serializers.CharField()
    tp = serializers.IntegerField()
    replicas = serializers.IntegerField()
    gpus = serializers.IntegerField()
    gpu_hours_per_million_tokens = serializers.FloatField()
    ttft_p95_s = serializers.FloatField(help_text="Predicted by the roofline and queueing model.")
    decode_batch = serializers.FloatField()
    max_model_len = serializers.IntegerField()
    gpu_memory_utilization = serializers.FloatField()
    kv_cache_dtype = serializers.CharField()


class SuggestionsSerializer(serializers.Serializer):
    model = serializers.CharField()
    suggestions = SuggestionSerializer(many=True)


class _CapacityView(APIView):
    permission_classes = [IsAuthenticated]
    query_class: type[_Query]

    def read(self, request) -> tuple[Model, dict]:
        query = self.query_class(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = dict(query.validated_data)
        try:
            model = find_model(Model.objects.restrict(request.user), data.pop("model"))
        except LookupError as exc:
            raise serializers.ValidationError({"model": [str(exc)]}) from exc
        return model, data

    @staticmethod
    def refused(exc: CapacityInputError):
        return serializers.ValidationError({name: [reason] for name, reason in exc.errors.items()})


class CapacityView(_CapacityView):
    """Does this model fit this GPU: weights, KV cache, blocks, concurrency and the smallest TP."""

    query_class = CapacityQuery

    @extend_schema(parameters=[CapacityQuery], responses={200: CapacityPlanSerializer})
    def get(self, request):
        model, data = self.read(request)
        try:
            return Response(describe(model, **data))
        except CapacityInputError as exc:
            raise self.refused(exc) from exc


class CapacitySuggestionsView(_CapacityView):
    """GPU kind × TP × replicas that serve a load within a TTFT objective, fewest GPUs first."""

    query_class = SuggestionQuery

    @extend_schema(parameters=[SuggestionQuery], responses={200: SuggestionsSerializer})
    def get(self, request):
        model, data = self.read(request)
        try:
            options = suggest(model, data["rate"], data["prompt_tokens"], data["output_tokens"], data["ttft_slo"],
                              kv_cache_dtype=data["kv_cache_dtype"],
                              gpu_memory_utilization=data["gpu_memory_utilization"],
                              gpu_types=[k.strip() for k in data.get("gpu_types", "").split(",") if k.strip()] or None)
        except CapacityInputError as exc:
            raise self.refused(exc) from exc
        return Response({"model": model.name, "suggestions": options})
