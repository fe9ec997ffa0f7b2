"""The queue, read back from Kueue (``fleet.queues``): a tenant's workloads and its queue
summary, and every ClusterQueue for those who operate the fleet. The same reads as the pages:
another tenant's preempting workload is described, never named."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ApiViewMixin, ScopedViewSet, read_responses
from fleet import queues
from fleet.models import QueueWorkload
from tenants.access import Action, may

TENANT = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="The tenant's slug.")


class AmountSerializer(serializers.Serializer[Any]):
    """An amount of one resource: two decimals in ``unit``, and as people read it."""

    resource = serializers.CharField()
    amount = serializers.DecimalField(
        max_digits=20, decimal_places=2, source="number", help_text="In `unit`."
    )
    unit = serializers.CharField()
    text = serializers.CharField(source="__str__", help_text='As shown: "2.00 GPU".')


class PreemptionSerializer(serializers.Serializer[Any]):
    reason = serializers.CharField(
        source="workload.preemption_reason",
        help_text="Kueue's: InClusterQueue, InCohortReclamation, InCohortFairSharing, "
        "InCohortReclaimWhileBorrowing.",
    )
    meaning = serializers.CharField(source="preemption")
    preemptor = serializers.CharField(
        help_text="namespace/name of the preempting workload when it is the same tenant's; "
        "otherwise a description (another tenant's workload is never named)."
    )


class QueueWorkloadSerializer(serializers.Serializer[Any]):
    """A Kueue Workload of the tenant (a Job, JobSet or pod group) and where it stands."""

    namespace = serializers.CharField(source="workload.namespace")
    name = serializers.CharField(source="workload.name")
    uid = serializers.CharField(source="workload.uid")
    owner_kind = serializers.CharField(source="workload.owner_kind")
    owner_name = serializers.CharField(source="workload.owner_name")
    local_queue = serializers.CharField(source="workload.local_queue")
    cluster_queue = serializers.CharField(source="workload.cluster_queue")
    priority = serializers.IntegerField(source="workload.priority", allow_null=True)
    priority_class = serializers.CharField(source="workload.priority_class")
    state = serializers.ChoiceField(source="workload.state", choices=QueueWorkload.State.choices)
    reason = serializers.CharField(source="workload.reason", help_text="Kueue's condition reason.")
    message = serializers.CharField(source="workload.message")
    preemption = serializers.SerializerMethodField()
    eviction_reason = serializers.CharField(source="workload.eviction_reason")
    gpus = AmountSerializer(many=True)
    flavors = serializers.ListField(child=serializers.CharField(), help_text="Assigned flavors.")
    position_in_local_queue = serializers.IntegerField(
        source="workload.position_in_local_queue",
        allow_null=True,
        help_text="From 0, as Kueue's visibility API counts; null when not waiting.",
    )
    position_in_cluster_queue = serializers.IntegerField(
        source="workload.position_in_cluster_queue", allow_null=True
    )
    positions_read = serializers.DateTimeField(source="workload.positions_read", allow_null=True)
    created = serializers.DateTimeField(source="workload.created", allow_null=True)
    admitted_at = serializers.DateTimeField(source="workload.admitted_at", allow_null=True)
    finished_at = serializers.DateTimeField(source="workload.finished_at", allow_null=True)

    def get_preemption(self, row: queues.WorkloadRow) -> dict[str, Any] | None:
        if not row.workload.preemption_reason:
            return None
        return dict(PreemptionSerializer(row).data)


class FlavorRowSerializer(serializers.Serializer[Any]):
    """One GPU resource on one flavor of a ClusterQueue (Kueue's live status)."""

    flavor = serializers.CharField()
    resource = serializers.CharField()
    nominal = AmountSerializer()
    in_use = AmountSerializer()
    borrowed = AmountSerializer(help_text="Lent by the cohort; reclaimable by preemption.")
    left = AmountSerializer(help_text="Nominal quota not used by the queue itself.")
    lendable = AmountSerializer()
    reserved_waiting = AmountSerializer(help_text="Quota held by workloads not yet admitted.")
    borrowing_limit = AmountSerializer(allow_null=True)
    lending_limit = AmountSerializer(allow_null=True)


class ClusterQueueSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    cohort = serializers.CharField()
    weight = serializers.CharField(help_text="Fair-sharing weight; empty when unset.")
    weighted_share = serializers.IntegerField(allow_null=True)
    pending = serializers.IntegerField()
    reserving = serializers.IntegerField()
    admitted = serializers.IntegerField()
    active = serializers.BooleanField(allow_null=True)


class FreshnessSerializer(serializers.Serializer[Any]):
    live = serializers.BooleanField(help_text="A Kueue watch or the sync heard the cluster lately.")
    heard = serializers.DateTimeField(allow_null=True)
    positions_read = serializers.DateTimeField(allow_null=True)


class QueueSummarySerializer(serializers.Serializer[Any]):
    """A tenant's queue: its ClusterQueue, quota per flavor and workload counts."""

    cluster_queue = ClusterQueueSerializer(allow_null=True)
    flavors = FlavorRowSerializer(many=True)
    waiting_for = AmountSerializer(many=True)
    counts = serializers.DictField(child=serializers.IntegerField())
    freshness = FreshnessSerializer()


class FleetQueueSerializer(serializers.Serializer[Any]):
    """A ClusterQueue of the fleet with its tenant, flavors and longest wait."""

    queue = ClusterQueueSerializer()
    tenant = serializers.CharField(help_text="Empty for a platform queue.")
    flavors = FlavorRowSerializer(many=True)
    longest_wait_seconds = serializers.SerializerMethodField()

    def get_longest_wait_seconds(self, row: queues.QueueRow) -> int | None:
        return int(row.longest_wait.total_seconds()) if row.longest_wait else None


class WorkloadViewSet(ScopedViewSet):
    """A tenant's Kueue workloads, by the namespace they run in."""

    in_tenant = True
    serializer_class = QueueWorkloadSerializer

    def get_queryset(self) -> QuerySet[Any]:
        return QueueWorkload.objects.filter(tenant=self.url_tenant()).order_by(
            "position_in_cluster_queue", "created", "name"
        )

    @extend_schema(
        summary="A tenant's workloads in Kueue",
        description="Every Workload in the tenant's namespace (tenant clusters' pods included), "
        "with its state derived from Kueue's conditions, Kueue's reason and message, who "
        "preempted it and why, and its positions from Kueue's visibility API.",
        parameters=[
            TENANT,
            OpenApiParameter("state", str, enum=list(QueueWorkload.State.values)),
        ],
        responses=read_responses(QueueWorkloadSerializer(many=True), extra=(400,)),
    )
    def list(self, request: Request, slug: str) -> Response:
        workloads = self.get_queryset()
        state = request.query_params.get("state")
        if state is not None:
            if state not in QueueWorkload.State.values:
                raise ValidationError(
                    {"state": [f"One of {', '.join(QueueWorkload.State.values)}."]}
                )
            workloads = workloads.filter(state=state)
        page = self.paginate_queryset(workloads)
        assert page is not None
        rows = queues.workload_rows(page, self.url_tenant().pk, timezone.now())
        return self.get_paginated_response(self.get_serializer(rows, many=True).data)


class QueueSummaryView(ScopedViewSet):
    """A tenant's queue summary."""

    in_tenant = True
    serializer_class = QueueSummarySerializer

    @extend_schema(
        summary="A tenant's queue: quota per flavor and workload counts",
        description="From Kueue's live ClusterQueue status: per flavor nominal quota, in use, "
        "borrowed (reclaimable), left, lendable and reserved; `freshness.live` is false when "
        "Kueue's queues are not being read.",
        parameters=[TENANT],
        responses=read_responses(QueueSummarySerializer),
    )
    def retrieve(self, request: Request, slug: str) -> Response:
        tenant = self.url_tenant()
        return Response(QueueSummarySerializer(queues.tenant_queue(tenant.pk, tenant.slug)).data)


class FleetQueueView(ApiViewMixin, GenericAPIView):  # type: ignore[type-arg]
    """Every ClusterQueue, for those who operate the fleet."""

    serializer_class = FleetQueueSerializer
    pagination_class = None

    @extend_schema(
        summary="Every ClusterQueue of the fleet",
        description="Platform admins only: each ClusterQueue with its tenant, cohort, "
        "fair-sharing weight and weighted share, quota and use per flavor, and its longest "
        "wait, longest first.",
        responses=read_responses(FleetQueueSerializer(many=True)),
    )
    def get(self, request: Request) -> Response:
        if not may(request.user, Action.OPERATE_FLEET):
            raise PermissionDenied("The fleet's queues are shown to platform admins.")
        board = queues.fleet_queues()
        return Response(FleetQueueSerializer(board.rows, many=True).data)
