"""Answering an "unknown outcome" request over the API (mounted under /api/v1/ by riverapp.urls).

``POST approvals/<id>/confirm-outcome`` with ``{"outcome": "done" | "not_done",
"resolution_comment": "..."}``: a person says whether an MCP write River sent, and
whose result was never recorded, happened (governance.unknown_outcome; docs/mcp.md
"Durability"). The request is read like any approval (404 outside the caller's
workspaces, 403 without the role or for the run's requester); ``/resolve`` refuses
this kind with 409 ``unknown_outcome``.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api import StrictInput
from governance.api import ApprovalSerializer
from governance.unknown_outcome import unknown_outcome_confirm
from rivercore import unknown_outcome
from rivercore.types.governance import DecisionChannel


class ConfirmOutcomeInput(StrictInput):
    outcome = serializers.ChoiceField(choices=list(unknown_outcome.CHOICES))
    resolution_comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=4000)


class ApprovalConfirmOutcome(APIView):
    @extend_schema(request=ConfirmOutcomeInput, responses=ApprovalSerializer)
    def post(self, request, approval_id):
        body = ConfirmOutcomeInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        approval = unknown_outcome_confirm(
            user=request.user,
            approval_id=approval_id,
            outcome=data["outcome"],
            comment=data["resolution_comment"],
            channel=DecisionChannel.API,
        )
        return Response(ApprovalSerializer(approval, context={"request": request}).data)


urlpatterns = [
    path(
        "approvals/<str:approval_id>/confirm-outcome", ApprovalConfirmOutcome.as_view(), name="approval-confirm-outcome"
    ),
]
