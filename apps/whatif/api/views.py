"""`/api/v1/whatif/` (runs: start, list, read with results, cancel) and `/api/v1/whatif-traces/` (upload, list,
read, delete), scoped per tenant like everything: another tenant's run or trace is a 404."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from apps.core.access import CHANGE, allowed, refusal
from apps.core.api.exceptions import Conflict, api_error
from apps.core.api.pagination import StandardPagination
from apps.core.api.permissions import ObjectWritePermission
from apps.core.api.views import ASCII_PK, ScopedModelViewSet
from apps.core.choices import AuditVia
from apps.serving.actions import ServiceDeleting
from apps.serving.api.serializers import InferenceServiceSerializer
from apps.serving.models import InferenceService
from apps.whatif.advice import dismiss
from apps.whatif.api.serializers import (
    AdviceSerializer,
    ApplySerializer,
    CalibrationSerializer,
    RunResultSerializer,
    RunSerializer,
    TraceSerializer,
    TraceUploadSerializer,
)
from apps.whatif.apply import apply_scenario
from apps.whatif.models import Advice, Calibration, Run, Trace
from apps.whatif.runs import cancel_run, start_run, upload_trace


def _may_change(request, obj) -> None:
    if not allowed(request.user, obj, CHANGE):
        raise PermissionDenied(refusal(request.user, obj))


class RunViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                 viewsets.GenericViewSet):
    """What-if runs. Starting one checks the alternatives with the service's own validation (a 400 naming the
    alternative and the field) and queues it for a worker; its row then carries status, progress and, once
    finished, the result."""

    queryset = Run.objects.select_related("service", "trace")
    serializer_class = RunSerializer
    permission_classes = [IsAuthenticated, ObjectWritePermission]
    pagination_class = StandardPagination
    lookup_value_regex = ASCII_PK
    filterset_fields = ["service", "status"]
    ordering_fields = ["created"]

    def get_queryset(self):
        return self.queryset.restrict(self.request.user).order_by("-created", "-id")

    def get_serializer_class(self):
        return RunResultSerializer if self.action == "retrieve" else RunSerializer

    @extend_schema(responses={201: RunSerializer})
    def create(self, request, *args, **kwargs):
        serializer = RunSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        _may_change(request, data["service"])
        try:
            run = start_run(service=data["service"], trace=data.get("trace"), alternatives=data.get("alternatives"),
                            search=data.get("search", False), actor=request.user, via=AuditVia.API)
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        return Response(RunSerializer(run, context=self.get_serializer_context()).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: RunSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel the run: a queued one at once, a running one within a second; a finished one is a 400."""
        run = self.get_object()
        _may_change(request, run)
        try:
            run = cancel_run(run, actor=request.user, via=AuditVia.API)
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        return Response(RunSerializer(run, context=self.get_serializer_context()).data)


    @extend_schema(request=ApplySerializer, responses={200: InferenceServiceSerializer})
    @action(detail=True, methods=["post"])
    def apply(self, request, pk=None):
        """Turn one of the run's alternatives into a change of its service, through the service's own validation
        and audit (a 400 naming the field when the service refuses it now)."""
        run = self.get_object()
        _may_change(request, run.service)
        body = ApplySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            service = apply_scenario(run, body.validated_data["scenario"], actor=request.user, via=AuditVia.API)
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        except ServiceDeleting as exc:
            raise Conflict(str(exc)) from exc
        service = InferenceService.objects.with_related().get(pk=service.pk)  # the pools as saved, not as prefetched
        return Response(InferenceServiceSerializer(service, context=self.get_serializer_context()).data)


class TraceViewSet(ScopedModelViewSet):
    """Uploaded load traces (Azure, BurstGPT, JSONL). An upload with a bad row is a 400 naming each bad line and
    column, and stores nothing; so is one over WHATIF_TRACE_MAX_BYTES."""

    queryset = Trace.objects.select_related("tenant").defer("data")
    serializer_class = TraceSerializer
    filterset_fields = ["tenant__slug", "format"]
    ordering_fields = ["created", "name"]
    http_method_names = ["get", "post", "delete", "head", "options"]


    @extend_schema(request={"multipart/form-data": TraceUploadSerializer}, responses={201: TraceSerializer})
    def create(self, request, *args, **kwargs):
        upload = TraceUploadSerializer(data=request.data, context=self.get_serializer_context())
        upload.is_valid(raise_exception=True)
        data = upload.validated_data
        tenant = data["tenant"]
        if not allowed(request.user, Trace(tenant=tenant), CHANGE):
            raise PermissionDenied(refusal(request.user, Trace(tenant=tenant)))
        try:
            # One byte past the limit is enough to refuse an upload that is too large.
            content = data["file"].read(settings.WHATIF_TRACE_MAX_BYTES + 1)
            trace = upload_trace(tenant=tenant, name=data["name"], fmt=data["format"], data=content,
                                 actor=request.user, via=AuditVia.API)
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        return Response(TraceSerializer(trace).data, status=status.HTTP_201_CREATED)


class CalibrationViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """How far the lab's replays of services' actual configurations were from what was observed, newest first
    (one per run on recorded load): filter by `service` to see one service's record over time."""

    queryset = Calibration.objects.all()
    serializer_class = CalibrationSerializer
    permission_classes = [IsAuthenticated]
    pagination_class = StandardPagination
    lookup_value_regex = ASCII_PK
    filterset_fields = ["service"]
    ordering_fields = ["created"]

    def get_queryset(self):
        return self.queryset.restrict(self.request.user).order_by("-created", "-id")


class AdviceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Tuning advice from live telemetry, each confirmed by a lab replay (a predicted effect of at least 5 %):
    the rule's inputs, the suggested alternative (open it in the lab, or start a run with it) and the effect."""

    queryset = Advice.objects.select_related("service")
    serializer_class = AdviceSerializer
    permission_classes = [IsAuthenticated, ObjectWritePermission]
    pagination_class = StandardPagination
    lookup_value_regex = ASCII_PK
    filterset_fields = ["service", "rule"]
    ordering_fields = ["created"]

    def get_queryset(self):
        return self.queryset.restrict(self.request.user).order_by("service", "rule")

    @extend_schema(request=None, responses={200: AdviceSerializer})
    @action(detail=True, methods=["post"])
    def dismiss(self, request, pk=None):
        """Hide the advice (audited); it stays hidden while its rule keeps firing."""
        advice = self.get_object()
        _may_change(request, advice)
        return Response(AdviceSerializer(dismiss(advice, actor=request.user, via=AuditVia.API)).data)
