"""`GET /api/v1/usage/`: the gateway's metered usage per hour or day, by tenant, key, service and model,
scoped like every list (members see their tenants' usage, staff everyone's)."""

from __future__ import annotations

from dataclasses import replace

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.gateway.usage import GRANULARITIES, MAX_RANGE, UsageQuery, usage

# `from` is a Python keyword, so the query's serializer is built from a mapping of its fields.
UsageQuerySerializer = type("UsageQuerySerializer", (serializers.Serializer,), {
    "__doc__": "Query parameters; any parameter not declared here is refused (400 naming it).",
    "tenant": serializers.SlugField(required=False, help_text="A tenant's slug."),
    "key": serializers.IntegerField(required=False, min_value=1, help_text="An inference key's id."),
    "service": serializers.IntegerField(required=False, min_value=1, help_text="A service's id."),
    "model": serializers.CharField(required=False, max_length=200,
                                   help_text="The model as requested: service, served model name or adapter."),
    "from": serializers.DateTimeField(required=False, help_text="ISO 8601, inclusive; default: 24 hours "
                                      "(granularity hour) or 30 days (day) before `to`."),
    "to": serializers.DateTimeField(required=False, help_text="ISO 8601, exclusive; default: the end of the "
                                    "current hour."),
    "granularity": serializers.ChoiceField(choices=GRANULARITIES, default="hour", help_text=(
        f"Rows per hour (at most {MAX_RANGE['hour'].days} days) or per UTC day (at most "
        f"{MAX_RANGE['day'].days} days).")),
    "validate": lambda self, attrs: _no_unknown(self, attrs),
})


def _no_unknown(serializer, attrs):
    unknown = sorted(set(serializer.initial_data) - set(serializer.fields) - {"format"})
    if unknown:
        raise serializers.ValidationError({name: ["Unknown query parameter."] for name in unknown})
    return attrs


class UsageRowSerializer(serializers.Serializer):
    period = serializers.DateTimeField(help_text="The hour's or the UTC day's start.")
    tenant = serializers.CharField()
    key_id = serializers.IntegerField(allow_null=True)
    key = serializers.CharField(allow_null=True, help_text="The key's name; null once the key is deleted.")
    service_id = serializers.IntegerField(allow_null=True)
    service = serializers.CharField(allow_null=True, help_text="The service's name; null once it is deleted.")
    model = serializers.CharField()
    batch = serializers.BooleanField(help_text="Lines of batches (/v1/batches); false: interactive requests.")
    requests = serializers.IntegerField()
    errors = serializers.IntegerField(help_text="Answers of 500 and above.")
    rate_limited = serializers.IntegerField(help_text="Answers of 429.")
    prompt_tokens = serializers.IntegerField()
    cached_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    ttft_p50_ms = serializers.FloatField(allow_null=True, help_text="At the gateway; hourly rows only.")
    ttft_p95_ms = serializers.FloatField(allow_null=True, help_text="At the gateway; hourly rows only.")


UsageSerializer = type("UsageSerializer", (serializers.Serializer,), {
    "granularity": serializers.CharField(),
    "from": serializers.DateTimeField(help_text="The range's start (inclusive)."),
    "to": serializers.DateTimeField(help_text="The range's end (exclusive)."),
    "results": UsageRowSerializer(many=True),
})


class UsageView(APIView):
    """Tokens, requests, errors, 429s and TTFT at the gateway, per hour or day and per tenant, key,
    service and model. The current hour is as fresh as the last rollup pass (GATEWAY_ROLLUP_SECONDS)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(parameters=[UsageQuerySerializer], responses={200: UsageSerializer}, operation_id="usage_list")
    def get(self, request):
        params = UsageQuerySerializer(data=request.query_params.dict())
        params.is_valid(raise_exception=True)
        data = params.validated_data
        query = UsageQuery.default(data["granularity"], tenant=data.get("tenant"), key=data.get("key"),
                                   service=data.get("service"), model=data.get("model"))
        if "to" in data:
            try:
                query = replace(query, end=data["to"], start=data["to"] - (query.end - query.start))
            except OverflowError as exc:
                too_early = "Too early: the default range would start before year 1."
                raise serializers.ValidationError({"to": [too_early]}) from exc
        if "from" in data:
            query = replace(query, start=data["from"])
        problems = query.problems()
        if problems:
            raise serializers.ValidationError({name: [reason] for name, reason in problems.items()})
        payload = {"granularity": query.granularity, "from": query.start, "to": query.end,
                   "results": usage(request.user, query)}
        return Response(UsageSerializer(payload).data)
