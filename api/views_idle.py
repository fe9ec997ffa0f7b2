"""A tenant's idle cases (``billing.idle``): list and read them, wake what idle reclaim
stopped, exempt a workload within the policy. Waking and exempting are the services' to
allow (``tenants.access``: the tenant's members and admins, not its viewers); an outsider
gets 404 on every URL."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ScopedViewSet, read_responses, write_responses
from billing import idle
from billing.models import IdleCase
from fleet.kube import KubeError

TENANT = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="The tenant's slug.")
CASE = OpenApiParameter("case_id", int, OpenApiParameter.PATH, description="The case's id.")


class IdleCaseSerializer(serializers.ModelSerializer[IdleCase]):
    class Meta:
        model = IdleCase
        fields = [
            "id",
            "namespace",
            "flavor",
            "workload",
            "kind",
            "target",
            "state",
            "utilisation_percent",
            "gpus",
            "detected_at",
            "act_after",
            "acted_at",
            "ended_at",
            "note",
        ]
        read_only_fields = fields


class ExemptInput(serializers.Serializer[Any]):
    until = serializers.DateTimeField(
        help_text="When the exemption ends (ISO 8601; UTC if no offset)."
    )
    reason = serializers.CharField(max_length=300, help_text="Why, in one line.")


class IdleCaseViewSet(ScopedViewSet):
    """Idle cases of one tenant, newest first."""

    in_tenant = True
    serializer_class = IdleCaseSerializer

    def get_queryset(self) -> Any:
        return IdleCase.objects.filter(tenant=self.url_tenant())

    def get_object(self) -> IdleCase:
        case = self.get_queryset().filter(pk=self.kwargs["case_id"]).first()
        if case is None:
            raise Http404("No such idle case.")
        return case

    @extend_schema(
        summary="A tenant's idle cases",
        parameters=[TENANT],
        responses=read_responses(IdleCaseSerializer),
    )
    def list(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        return self.get_paginated_response(IdleCaseSerializer(page, many=True).data)

    @extend_schema(
        summary="One idle case",
        parameters=[TENANT, CASE],
        responses=read_responses(IdleCaseSerializer, detail=True),
    )
    def retrieve(self, request: Request, slug: str, case_id: int) -> Response:
        return self.detail_response(self.get_object())

    @extend_schema(
        summary="Wake what idle reclaim stopped",
        description="A suspended job's Kueue Workload is made active again (it queues anew); "
        "an endpoint or cluster is woken through Git. Members and admins of the tenant.",
        parameters=[TENANT, CASE],
        request=None,
        responses=write_responses(IdleCaseSerializer, if_match=False),
    )
    def wake(self, request: Request, slug: str, case_id: int) -> Response:
        try:
            case = idle.do_wake(self.get_object(), acting_user=request.user)
        except KubeError as exc:
            raise serializers.ValidationError({"": [str(exc)]}) from exc
        return self.detail_response(case)

    @extend_schema(
        summary="Exempt the case's workload from idle reclaim",
        description="Until a time within the policy's longest exemption; a stopped workload "
        "is woken first. Members and admins of the tenant.",
        parameters=[TENANT, CASE],
        request=ExemptInput,
        responses=write_responses(IdleCaseSerializer, if_match=False),
    )
    def exempt(self, request: Request, slug: str, case_id: int) -> Response:
        case = self.get_object()
        data = ExemptInput(data=request.data)
        data.is_valid(raise_exception=True)
        until = data.validated_data["until"]
        until = until if until.tzinfo else until.replace(tzinfo=UTC)
        try:
            idle.do_exempt(case, until, data.validated_data["reason"], acting_user=request.user)
        except KubeError as exc:
            raise serializers.ValidationError({"": [str(exc)]}) from exc
        case.refresh_from_db()
        return self.detail_response(case)
