"""`GET /api/v1/services/{id}/decisions/?since=&until=&pool=`: a service's scaling decisions, newest first,
scoped like the services API (another tenant's service is a 404; bad parameters are a 400)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.generics import ListAPIView

from apps.autoscaling.api.serializers import ScalingDecisionSerializer
from apps.autoscaling.models import ScalingDecision
from apps.serving.models import InferenceService
from apps.telemetry.series import BadSeriesQuery, parse_moment

PARAMETERS = [
    OpenApiParameter("since", OpenApiTypes.STR, description="ISO 8601 time, or a duration back from now (`15m`, "
                     "`2h`, `7d`). Default: no lower bound."),
    OpenApiParameter("until", OpenApiTypes.STR, description="ISO 8601 time or a duration back from now. Default now."),
    OpenApiParameter("pool", OpenApiTypes.STR, description="One pool of the service (`engine`, `prefill`, `decode`, "
                     "`leader`); every pool when left out."),
]


KNOWN_PARAMETERS = {"since", "until", "pool", "page", "page_size", "format"}


class ServiceDecisionsView(ListAPIView):
    serializer_class = ScalingDecisionSerializer
    filter_backends = []

    def service(self) -> InferenceService:
        return get_object_or_404(InferenceService.objects.restrict(self.request.user), pk=self.kwargs["pk"])

    def get_queryset(self):
        service = self.service()
        params = self.request.query_params
        rows = ScalingDecision.objects.restrict(self.request.user).filter(service=service)
        now = timezone.now()
        errors = {name: ["Unknown query parameter; this list takes since, until, pool, page and page_size."]
                  for name in params if name not in KNOWN_PARAMETERS}
        bounds = {}
        for name in ("since", "until"):
            if params.get(name):
                try:
                    bounds[name] = parse_moment(params[name], name, now)
                except BadSeriesQuery as exc:
                    errors[name] = [str(exc)]
        if "since" in bounds and "until" in bounds and bounds["since"] >= bounds["until"]:
            errors["since"] = ["since must be earlier than until."]
        pool = params.get("pool") or None  # `?pool=` is not given, as everywhere in the API
        if pool is not None:
            roles = list(service.pools.values_list("role", flat=True))
            if pool not in roles:
                errors["pool"] = [f"This service has no {pool!r} pool (it has: {', '.join(roles)})."]
        if errors:
            raise ValidationError(errors)
        if "since" in bounds:
            rows = rows.filter(time__gte=bounds["since"])
        if "until" in bounds:
            rows = rows.filter(time__lte=bounds["until"])
        if pool is not None:
            rows = rows.filter(pool=pool)
        return rows.order_by("-time", "-id")

    @extend_schema(parameters=PARAMETERS, operation_id="services_decisions_list")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
