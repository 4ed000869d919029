"""`GET /api/v1/services/{id}/metrics/`: a service's stored figures over a time range, scoped like the
services API (another tenant's service is a 404)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response

from apps.serving.models import InferenceService
from apps.telemetry.api.serializers import ServiceMetricsSerializer
from apps.telemetry.series import BadSeriesQuery, role_from_query, series_payload, window_from_query

PARAMETERS = [
    OpenApiParameter("since", OpenApiTypes.STR, description="ISO 8601 time, or a duration back from now "
                     "(`15m`, `2h`, `7d`). Default `15m`."),
    OpenApiParameter("until", OpenApiTypes.STR, description="ISO 8601 time or a duration back from now. Default now."),
    OpenApiParameter("step", OpenApiTypes.STR, description="Seconds per point (`30`, `1m`, `1h`). Raised so "
                     "that at most 720 points come back; at least the scrape period, or a minute for rollups."),
    OpenApiParameter("role", OpenApiTypes.STR, description="A pool (`prefill`, `decode`) of a multi-pool "
                     "service; during a canary rollout one revision's engines (`stable`, `canary`); the whole "
                     "service when left out."),
]


class ServiceMetricsView(GenericAPIView):
    """A service's TTFT, inter-token latency, KV-cache usage, queues, throughput and replicas over time."""

    queryset = InferenceService.objects.all()
    serializer_class = ServiceMetricsSerializer
    pagination_class = None
    filter_backends = []

    def get_queryset(self):
        return InferenceService.objects.restrict(self.request.user)

    @extend_schema(parameters=PARAMETERS, responses={200: ServiceMetricsSerializer}, operation_id="services_metrics")
    def get(self, request, pk: int):
        service = get_object_or_404(self.get_queryset(), pk=pk)
        try:
            window = window_from_query(request.query_params)
            role = role_from_query(request.query_params)
        except BadSeriesQuery as exc:
            raise ValidationError({"detail": str(exc)}) from exc
        payload = series_payload(service.pk, window, role=role)
        return Response(ServiceMetricsSerializer(payload).data)
