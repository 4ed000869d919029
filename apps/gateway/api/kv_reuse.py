"""`GET /api/v1/services/{id}/kv-reuse/`: what more (or less) CPU memory for the KV cache would buy the service,
from the reuse of its own recent prompts (apps/gateway/kv_reuse.py); scoped like the services API (another
tenant's service is a 404)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from apps.gateway.kv_reuse import MIN_REQUESTS, cached_service_reuse
from apps.serving.models import InferenceService


class ReuseSizeSerializer(serializers.Serializer):
    label = serializers.CharField(help_text="`current`, or the multiple of the current tier (of the GPU cache "
                                  "without one): `0.5x`, `2x`, `4x`.")
    cpu_tier_gib = serializers.FloatField(help_text="CPU tier, GiB of host memory per GPU (0: none).")
    hit_rate = serializers.FloatField(help_text="Prompt tokens hit in either tier over prompt tokens looked up.")
    gpu_hit_rate = serializers.FloatField()
    cpu_hit_rate = serializers.FloatField(help_text="Loaded back from the CPU tier.")
    ttft_p95_s = serializers.FloatField(allow_null=True, help_text="Estimated TTFT p95 at this size.")


class TierTtftSerializer(serializers.Serializer):
    requests = serializers.IntegerField()
    ttft_p50_s = serializers.FloatField(allow_null=True)
    ttft_p95_s = serializers.FloatField(allow_null=True)


class TtftByTierSerializer(serializers.Serializer):
    gpu = TierTtftSerializer()
    cpu = TierTtftSerializer()
    miss = TierTtftSerializer()


class EvictionsSerializer(serializers.Serializer):
    gpu = serializers.FloatField(allow_null=True, help_text="Tokens a second the GPU cache evicts (into the tier).")
    cpu_tier = serializers.FloatField(allow_null=True, help_text="Tokens a second the CPU tier drops (null: none).")


class KvReuseSerializer(serializers.Serializer):
    available = serializers.BooleanField(help_text=f"False with fewer than {MIN_REQUESTS} sampled requests "
                                         "or a service the planner cannot place; the rest is then absent.")
    requests = serializers.IntegerField(required=False, help_text="Requests sampled (the latest, within window_s).")
    window_s = serializers.IntegerField(required=False)
    chars_per_token = serializers.FloatField(required=False)
    gpu_cache_tokens = serializers.IntegerField(required=False)
    replicas_counted = serializers.IntegerField(required=False, help_text="Replicas whose caches add up (a "
                                                "prefix-aware router's); 1 otherwise.")
    cpu_tier_gib = serializers.FloatField(required=False)
    sizes = ReuseSizeSerializer(many=True, required=False)
    knee_gib = serializers.FloatField(required=False, help_text="CPU tier per GPU beyond which more buys under 1 % "
                                      "more hits (0: the GPU cache already holds the reuse).")
    sentence = serializers.CharField(required=False)
    evicted_tokens_per_s = EvictionsSerializer(required=False, help_text="Evictions in the same replay, at the "
                                               "current sizes (no engine exports both).")
    ttft_by_tier = TtftByTierSerializer(required=False, help_text="Measured TTFT of the sampled requests by the "
                                        "tier the replay places their prefix in.")


class ServiceKvReuseView(GenericAPIView):
    """The service's reuse curve read at its CPU tier's size and at ½×, 2× and 4×: hit rates and TTFT p95."""

    queryset = InferenceService.objects.all()
    serializer_class = KvReuseSerializer
    pagination_class = None
    filter_backends = []

    def get_queryset(self):
        return InferenceService.objects.restrict(self.request.user)

    @extend_schema(responses={200: KvReuseSerializer}, operation_id="services_kv_reuse")
    def get(self, request, pk: int):
        service = get_object_or_404(self.get_queryset().select_related("model", "runtime"), pk=pk)
        found = cached_service_reuse(service)
        return Response(KvReuseSerializer({"available": False} if found is None else {"available": True, **found}).data)
