"""API of a service's rollouts, scoped like the services API (another tenant's service is a 404):

- `GET  /services/{id}/rollouts/`: the service's rollouts, newest first, each with its decisions;
- `POST /services/{id}/rollout/{pause|resume|promote|abort}/`: a person's action on the running rollout
  (viewers get 403; an action the rollout's state does not allow gets 409 and changes nothing).
"""

from __future__ import annotations

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.access import CHANGE, allowed, refusal
from apps.core.api.exceptions import Conflict
from apps.core.choices import AuditVia
from apps.rollouts.actions import InvalidRolloutState, act
from apps.rollouts.api.serializers import RolloutSerializer
from apps.rollouts.models import Rollout, RolloutDecision
from apps.serving.models import InferenceService


def _service(request, pk) -> InferenceService:
    return get_object_or_404(InferenceService.objects.restrict(request.user), pk=pk)


class ServiceRolloutsView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(responses={200: RolloutSerializer(many=True)})
    def get(self, request, pk: int):
        """The service's rollouts, newest first, each with its decisions (newest first)."""
        if request.query_params:
            raise ValidationError({k: ["Unknown query parameter; rollouts take none."] for k in request.query_params})
        service = _service(request, pk)
        decisions = Prefetch("decisions", queryset=RolloutDecision.objects.order_by("-time", "-id"))
        rollouts = Rollout.objects.restrict(request.user).filter(service=service).prefetch_related(decisions)
        return Response(RolloutSerializer(rollouts, many=True).data)


class RolloutActionView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(request=None, responses={
        200: RolloutSerializer, 403: OpenApiResponse(description="Viewers cannot act on rollouts"),
        409: OpenApiResponse(description="No rollout running, or the action does not apply to its state"),
    })
    def post(self, request, pk: int, action: str):
        """Pause, resume, promote now or abort the service's running rollout (audited)."""
        service = _service(request, pk)
        if not allowed(request.user, service, CHANGE):
            raise PermissionDenied(refusal(request.user, service))
        try:
            rollout = act(service, action, actor=request.user, via=AuditVia.API)
        except InvalidRolloutState as exc:
            raise Conflict(str(exc)) from exc
        return Response(RolloutSerializer(Rollout.objects.get(pk=rollout.pk)).data)
