"""API views of services: CRUD with optimistic concurrency (ETag/If-Match → 412, stale version → 409),
scaling one pool, and deletion that marks the service for the reconciler (202)."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import ParseError
from rest_framework.response import Response

from apps.core.api.exceptions import Conflict, PreconditionFailed, api_error
from apps.core.api.views import ScopedModelViewSet
from apps.core.choices import AuditVia
from apps.serving.actions import (
    AutoscalerOwnsReplicas,
    ServiceDeleting,
    StaleVersion,
    request_deletion,
    scale_pool,
)
from apps.serving.api import listing
from apps.serving.api.revisions import RevisionActions
from apps.serving.api.serializers import InferenceServiceSerializer, ScaleSerializer
from apps.serving.filtersets import InferenceServiceFilterSet
from apps.serving.models import InferenceService

IF_MATCH = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    required=False,
    description='The ETag you read (e.g. "3"); a stale one gets 412.',
)


@extend_schema_view(
    update=extend_schema(parameters=[IF_MATCH]),
    partial_update=extend_schema(parameters=[IF_MATCH]),
    destroy=extend_schema(parameters=[IF_MATCH], responses={202: InferenceServiceSerializer}),
)
class InferenceServiceViewSet(RevisionActions, ScopedModelViewSet):
    # Ordered by the (tenant, name) unique index, so a page is an index range instead of a sort.
    queryset = InferenceService.objects.with_related().order_by("tenant_id", "name")
    serializer_class = InferenceServiceSerializer
    filterset_class = InferenceServiceFilterSet
    search_fields = ["name", "tenant__slug", "model__name"]
    ordering_fields = ["name", "created", "updated", "phase", "generation"]

    def if_match_version(self) -> int | None:
        header = self.request.headers.get("If-Match")
        if not header or header.strip() == "*":
            return None
        try:
            return int(header.strip().removeprefix("W/").strip('"'))
        except ValueError as exc:
            raise ParseError('If-Match must be an ETag such as "3".') from exc

    def guarded(self, operation):
        """Run a write; a stale If-Match is 412, a stale body version 409, a deleting service 409."""
        header_version = self.if_match_version()
        try:
            return operation(header_version)
        except StaleVersion as exc:
            if header_version is not None:
                raise PreconditionFailed() from exc
            raise Conflict(str(exc)) from exc
        except (ServiceDeleting, AutoscalerOwnsReplicas) as exc:
            raise Conflict(str(exc)) from exc

    def list(self, request, *args, **kwargs):
        # A page chosen on keys alone, rendered from plain rows as the serializer would (see listing.py).
        # (A comment, not a docstring: drf-spectacular would publish a docstring as the operation's description.)
        queryset = listing.page_keys(self.filter_queryset(self.get_queryset()))
        page = self.paginate_queryset(queryset)
        rows = listing.service_rows([row["pk"] for row in (queryset if page is None else page)], request.user)
        return Response(rows) if page is None else self.get_paginated_response(rows)

    def retrieve(self, request, *args, **kwargs):
        response = super().retrieve(request, *args, **kwargs)
        response["ETag"] = f'"{response.data["version"]}"'
        return response

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if self.request is not None and self.request.method in ("PUT", "PATCH"):
            version = self.if_match_version()
            if version is not None:
                context["expected_version"] = version
        return context

    def update(self, request, *args, **kwargs):
        response = self.guarded(lambda _version: super(InferenceServiceViewSet, self).update(request, *args, **kwargs))
        response["ETag"] = f'"{response.data["version"]}"'
        return response

    def perform_update(self, serializer):
        # save_service writes the audit entry itself (inside its transaction).
        serializer.save()

    def perform_create(self, serializer):
        serializer.save()

    def destroy(self, request, *args, **kwargs):
        service = self.get_object()
        self.check_object_permissions(request, service)
        try:
            self.guarded(
                lambda version: request_deletion(
                    service, actor=request.user, via=AuditVia.API, expected_version=version
                )
            )
        except Conflict:
            if not InferenceService.objects.filter(pk=service.pk, deletion_requested_at__isnull=False).exists():
                raise
        service.refresh_from_db()
        return Response(self.get_serializer(service).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        request=ScaleSerializer,
        parameters=[IF_MATCH],
        responses={200: InferenceServiceSerializer, 400: OpenApiResponse(description="Replicas outside min..max"),
                   409: OpenApiResponse(description="The builtin autoscaler scales this service; change min/max")},
    )
    @action(detail=True, methods=["post"])
    def scale(self, request, pk=None):
        """Set the replicas of one pool (within its min and max)."""
        service = self.get_object()
        serializer = ScaleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data

        def do(header_version):
            expected = header_version if header_version is not None else data.get("version")
            return scale_pool(
                service,
                role=data["pool"],
                replicas=data["replicas"],
                actor=request.user,
                via=AuditVia.API,
                expected_version=expected,
            )

        try:
            service = self.guarded(do)
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        service = self.get_queryset().get(pk=service.pk)
        response = Response(self.get_serializer(service).data)
        response["ETag"] = f'"{service.version}"'
        return response

    @extend_schema(
        responses={200: OpenApiResponse(
            response=OpenApiTypes.OBJECT, description="{count, objects}: every Kubernetes object the service renders to"
        )},
    )
    @action(detail=True, methods=["get"])
    def manifests(self, request, pk=None):
        """The Kubernetes objects this service renders to, in apply order (a GitOps export)."""
        from apps.serving.rendering import render_service
        from apps.serving.rendering.spec import spec_from_service

        service = self.get_object()
        try:
            objects = render_service(spec_from_service(service))
        except ValueError as exc:
            raise Conflict(f"The service cannot be rendered: {exc}") from exc
        return Response({"count": len(objects), "objects": objects})
