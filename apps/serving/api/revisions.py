"""API of revisions, mixed into the services viewset (so they are scoped, and 404, exactly like services):

- `GET  /services/{id}/revisions/`: newest first, each with what changed since the one before it;
- `GET  /services/{id}/revisions/{n}/diff/?against=m`: what differs from revision m to revision n;
- `POST /services/{id}/revisions/{n}/rollback/`: make revision n current again (a new revision, 201).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from apps.core.api.exceptions import Conflict, api_error
from apps.core.choices import AuditVia
from apps.core.ids import ascii_int
from apps.serving.actions import ServiceDeleting, rollback
from apps.serving.models import Revision
from apps.serving.revisions import RollbackRefused, changes, number_of


class ChangeSerializer(serializers.Serializer):
    path = serializers.CharField()
    before = serializers.CharField()
    after = serializers.CharField()


class RevisionSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_repr", help_text="Who made the change (empty: the system).")
    current = serializers.SerializerMethodField(help_text="True for the revision the service runs now.")
    changes = serializers.SerializerMethodField(help_text="What changed since the previous revision, in words.")

    class Meta:
        model = Revision
        fields = ["number", "created", "actor", "audit_entry", "restored_from", "current", "changes", "spec"]
        read_only_fields = fields

    def get_current(self, revision) -> bool:
        return revision.number == self.context["current"]

    @extend_schema_field(ChangeSerializer(many=True))
    def get_changes(self, revision):
        previous = self.context["previous"].get(revision.number)
        return ChangeSerializer(changes(previous, revision.spec), many=True).data


class DiffSerializer(serializers.Serializer):
    to = serializers.IntegerField(source="to_number")
    against = serializers.IntegerField()
    changes = ChangeSerializer(many=True)


def revision_context(revisions: list[Revision]) -> dict:
    """What the serializer needs: the current number and each revision's predecessor's spec."""
    ordered = sorted(revisions, key=lambda r: r.number)
    previous = {r.number: (ordered[i - 1].spec if i else None) for i, r in enumerate(ordered)}
    return {"current": ordered[-1].number if ordered else None, "previous": previous}


AGAINST = OpenApiParameter("against", OpenApiTypes.INT, required=True,
                           description="The revision to compare with (the diff reads from it to this one).")


class RevisionActions:
    """Mixed into InferenceServiceViewSet."""

    def _revision(self, service, number) -> Revision:
        try:
            return service.revisions.get(number=number_of(number))
        except (Revision.DoesNotExist, ValueError) as exc:
            raise Http404(f"This service has no revision {number}.") from exc

    @extend_schema(responses={200: RevisionSerializer(many=True)}, filters=False)
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def revisions(self, request, pk=None):
        """The service's revisions, newest first (each change to what its pods run is one)."""
        if request.query_params:
            raise ValidationError({k: ["Unknown query parameter; revisions take none."] for k in request.query_params})
        service = self.get_object()
        revisions = list(service.revisions.order_by("-number"))
        context = {**self.get_serializer_context(), **revision_context(revisions)}
        return Response(RevisionSerializer(revisions, many=True, context=context).data)

    @extend_schema(parameters=[AGAINST], responses={200: DiffSerializer}, filters=False)
    @action(detail=True, methods=["get"], url_path=r"revisions/(?P<number>[0-9]+)/diff", filter_backends=[])
    def revision_diff(self, request, pk=None, number=None):
        """What differs from revision `against` to revision `number`, in words."""
        unknown = set(request.query_params) - {"against"}
        if unknown:
            raise ValidationError({k: ["Unknown query parameter; diff takes against."] for k in sorted(unknown)})
        against = request.query_params.get("against", "")
        if ascii_int(against) is None:
            raise ValidationError({"against": ["A revision number is required (e.g. ?against=1)."]})
        service = self.get_object()
        new, old = self._revision(service, number), self._revision(service, against)
        data = {"to_number": new.number, "against": old.number, "changes": changes(old.spec, new.spec)}
        return Response(DiffSerializer(data).data)

    @extend_schema(request=None, filters=False, responses={
        201: RevisionSerializer, 403: OpenApiResponse(description="Viewers cannot roll back"),
        404: OpenApiResponse(description="No such revision"),
        409: OpenApiResponse(description="Already the current spec, or it names a deleted model/runtime/adapter"),
    })
    @action(detail=True, methods=["post"], url_path=r"revisions/(?P<number>[0-9]+)/rollback", filter_backends=[])
    def revision_rollback(self, request, pk=None, number=None):
        """Make revision `number` current again: validated and audited like any change; writes a new revision
        with the same spec (`restored_from` = number)."""
        service = self.get_object()
        revision = self._revision(service, number)
        try:
            new = rollback(service, revision.number, actor=request.user, via=AuditVia.API)
        except (RollbackRefused, ServiceDeleting) as exc:
            raise Conflict(str(exc)) from exc
        except DjangoValidationError as exc:
            raise api_error(exc) from exc
        revisions = list(service.revisions.order_by("-number"))
        context = {**self.get_serializer_context(), **revision_context(revisions)}
        return Response(RevisionSerializer(new, context=context).data, status=status.HTTP_201_CREATED)
