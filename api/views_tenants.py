"""Tenants, their members, usage and cost, invoices and the fleet's capacity."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import (
    IF_MATCH,
    ApiViewMixin,
    ScopedViewSet,
    problems,
    read_responses,
    write_responses,
)
from api.models import Robot
from api.permissions import ADMIN
from api.serializers import (
    DetailSerializer,
    FleetCapacitySerializer,
    GpuQuotaInput,
    InvoiceSerializer,
    MemberAddInput,
    MemberRoleInput,
    MemberSerializer,
    TenantSerializer,
    UsageSerializer,
)
from billing.dashboards import RangeError, parse_range, tenant_dashboard
from billing.models import Invoice
from catalog.specs import mig_opt_in, offered_flavors
from fleet.capacity import capacity_rows
from fleet.models import Node, Workload
from gitops.fleet import configured_fleet
from tenants import services as tenant_services
from tenants.access import Action, may, require, tenants_where
from tenants.models import Membership, Tenant
from tenants.quota import do_set_gpu_quota, require_quota_setter

TENANT = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="The tenant's slug.")


@extend_schema_view(
    list=extend_schema(summary="Tenants you can see", responses=read_responses(TenantSerializer)),
    retrieve=extend_schema(
        summary="One tenant", responses=read_responses(TenantSerializer, detail=True)
    ),
)
class TenantViewSet(ScopedViewSet):
    queryset = Tenant.objects.order_by("slug")
    serializer_class = TenantSerializer
    tenant_path = "pk"
    lookup_field = "slug"
    in_tenant = True

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request: Request, slug: str) -> Response:
        return self.detail_response(self.get_object())

    @extend_schema(
        summary="Set a tenant's GPU quota (platform admins)",
        description="The most GPUs its shares may add up to; refused (400, nothing changed) "
        "below what its approved shares already hold. Audited with the old and new value.",
        parameters=[IF_MATCH],
        request=GpuQuotaInput,
        responses=write_responses(TenantSerializer),
    )
    @action(detail=True, methods=["post"], url_path="gpu-quota", write_scope=ADMIN)
    def gpu_quota(self, request: Request, slug: str) -> Response:
        tenant = self.get_object()
        # Who may never set it hears so (403), not about the body.
        require_quota_setter(request.user, tenant)
        self.check_if_match(tenant)
        data = self.input(GpuQuotaInput)
        do_set_gpu_quota(tenant, acting_user=request.user, quota=data["gpu_quota"])
        return self.detail_response(self.get_queryset().get(pk=tenant.pk))


class MemberViewSet(ScopedViewSet):
    """Members of one tenant; admins of the tenant (and platform admins) add, change, remove."""

    in_tenant = True
    serializer_class = MemberSerializer
    write_scope = ADMIN
    lookup_field = "user__username"
    lookup_url_kwarg = "username"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet[Any]:
        tenant = self.url_tenant()
        return (
            Membership.objects.filter(tenant=tenant)
            .annotate(is_robot=Exists(Robot.objects.filter(user=OuterRef("user"))))
            .select_related("user")
            .order_by("user__username")
        )

    @extend_schema(
        summary="Members of a tenant",
        parameters=[TENANT],
        responses=read_responses(MemberSerializer),
    )
    def list(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(
        summary="One member",
        parameters=[TENANT],
        responses=read_responses(MemberSerializer, detail=True),
    )
    def retrieve(self, request: Request, slug: str, username: str) -> Response:
        return self.detail_response(self.get_object())

    @extend_schema(
        summary="Add a member by username, or invite an e-mail address",
        description="A username adds that account if there is one; an e-mail address is "
        "always an invitation, taken up when someone signs in holding it confirmed (through "
        "single sign-on or the confirmation mail). Answers alike whether or not an account "
        "matched, so nobody learns who has an account; list the members to see the result.",
        parameters=[TENANT],
        request=MemberAddInput,
        responses=write_responses(DetailSerializer, code=status.HTTP_202_ACCEPTED, if_match=False),
    )
    def create(self, request: Request, slug: str) -> Response:
        found = self.url_tenant()
        data = self.input(MemberAddInput)
        tenant_services.do_add_member_by_identifier(
            found, acting_user=request.user, identifier=data["user"], role=data["role"]
        )
        ident = data["user"].strip()
        detail = (
            f"{ident.lower()} is invited to {found.slug}: whoever signs in holding this address "
            "confirmed joins."
            if "@" in ident
            else f"If an account matches {ident!r}, it is now in {found.slug}."
        )
        return Response({"detail": detail}, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Change a member's role",
        parameters=[TENANT, IF_MATCH],
        request=MemberRoleInput,
        responses=write_responses(MemberSerializer),
    )
    def partial_update(self, request: Request, slug: str, username: str) -> Response:
        membership = self.get_object()
        self.check_if_match(membership)
        data = self.input(MemberRoleInput)
        membership = tenant_services.do_change_member_role(
            membership, acting_user=request.user, role=data["role"]
        )
        return self.detail_response(membership)

    @extend_schema(
        summary="Remove a member",
        parameters=[TENANT, IF_MATCH],
        request=None,
        responses={204: None, **problems(401, 403, 404, 406, 400, 412)},
    )
    def destroy(self, request: Request, slug: str, username: str) -> Response:
        membership = self.get_object()
        self.check_if_match(membership)
        tenant_services.do_remove_member(membership, acting_user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class UsageView(ScopedViewSet):
    """GPU usage and its cost for one tenant over a range."""

    in_tenant = True

    @extend_schema(
        summary="A tenant's usage and cost",
        description="`range` is one of 24h, 7d, 30d, 90d, 365d (the last N days), or `custom` "
        "with `from` and `to` dates (both included).",
        parameters=[
            TENANT,
            OpenApiParameter("range", str, enum=["24h", "7d", "30d", "90d", "365d", "custom"]),
            OpenApiParameter("from", str, description="First day (custom range), YYYY-MM-DD."),
            OpenApiParameter("to", str, description="Last day (custom range), YYYY-MM-DD."),
        ],
        responses=read_responses(UsageSerializer, extra=(400,)),
    )
    def retrieve(self, request: Request, slug: str) -> Response:
        found = self.url_tenant()
        require(request.user, Action.VIEW_COST, found)
        try:
            window = parse_range(request.query_params, timezone.now())
        except RangeError as exc:
            raise ValidationError({"range": [str(exc)]}) from exc
        board = tenant_dashboard(window, found.slug)
        data = {
            "tenant": found.slug,
            "start": window.start,
            "end": window.end,
            "bucket": window.bucket,
            "currency": settings.BILLING_CURRENCY,
            "total": board.total,
            "series": board.series,
            "price_lines": board.price_lines,
        }
        return Response(UsageSerializer(data).data)


@extend_schema_view(
    list=extend_schema(
        summary="Invoices",
        description="Finance and platform admins see every invoice, drafts included; a "
        "tenant's members see its issued ones.",
        parameters=[OpenApiParameter("tenant", str, description="Only this tenant's.")],
        responses=read_responses(InvoiceSerializer),
    ),
    retrieve=extend_schema(
        summary="One invoice", responses=read_responses(InvoiceSerializer, detail=True)
    ),
)
class InvoiceViewSet(ScopedViewSet):
    queryset = Invoice.objects.all()
    serializer_class = InvoiceSerializer
    view_action = Action.VIEW_COST

    def restrict(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        queryset = super().restrict(queryset)
        if not self.everywhere():
            queryset = queryset.filter(status=Invoice.Status.ISSUED)
        return queryset

    def list(self, request: Request) -> Response:
        invoices = self.get_queryset()
        slug = request.query_params.get("tenant")
        if slug:
            invoices = invoices.filter(tenant_slug=slug)
        page = self.paginate_queryset(invoices)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return self.detail_response(self.get_object())


class CapacityView(ApiViewMixin, GenericAPIView):  # type: ignore[type-arg]
    """GPUs per flavor: what is free, to whoever can see a tenant; in use and unavailable
    (cordoned or unhealthy nodes) too, to those who operate the fleet. What others use is
    theirs: a tenant learns only what is left."""

    serializer_class = FleetCapacitySerializer
    pagination_class = None

    @extend_schema(
        summary="Fleet capacity per flavor",
        description="What is free decides what to ask for. Those who operate the fleet "
        "(platform admins, as on the fleet pages) get every flavor with what is in use, free "
        "and unavailable. Anyone else who can see a tenant gets what is free of the flavors "
        "those tenants may ask for (a dedicated tenant none that shares GPUs, and no MIG pool "
        "unless a platform admin enabled MIG for it), and nothing "
        "about what others use.",
        responses=read_responses(FleetCapacitySerializer(many=True)),
    )
    def get(self, request: Request) -> Response:
        fleet = configured_fleet()
        rows = capacity_rows(fleet, Node.objects.all(), Workload.objects.all())
        if may(request.user, Action.OPERATE_FLEET):
            return Response(FleetCapacitySerializer(rows, many=True).data)
        tenants = tenants_where(request.user, Action.VIEW).order_by()
        trust = set(tenants.values_list("trust_level", flat=True).distinct())
        if not trust:
            raise PermissionDenied("Fleet capacity is shown to members of a tenant.")
        # A flavor any of the caller's tenants may ask for; only the dedicated lose some.
        dedicated = trust == {Tenant.TrustLevel.DEDICATED}
        # MIG pools too once one of them has the platform admin's opt-in.
        mig = not dedicated or any(mig_opt_in(tenant) for tenant in tenants)
        offered = {f.name for f in offered_flavors(fleet, dedicated=dedicated, mig=mig)}
        free = [
            {
                "flavor": r.flavor,
                "mode": r.mode,
                "resource": r.resource,
                "unit": r.unit,
                "free": r.free,
            }
            for r in rows
            if r.flavor in offered
        ]
        return Response(FleetCapacitySerializer(free, many=True).data)
