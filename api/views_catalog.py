"""Resource requests (and their decisions) and change requests (review, merge)."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from api.base import IF_MATCH, ApiViewMixin, ScopedViewSet, read_responses, write_responses
from api.permissions import ADMIN, REQUEST
from api.serializers import (
    ApproveInput,
    ApproveManyInput,
    ChangeDetailSerializer,
    ChangeSerializer,
    EmptyInput,
    JobSerializer,
    NoteInput,
    RequestDetailSerializer,
    RequestPreviewSerializer,
    RequestSerializer,
    RequiredNoteInput,
    ReviewInput,
    cost_data,
)
from billing.request_costs import request_costs
from catalog import services as catalog
from catalog.models import Kind, ResourceRequest
from catalog.preview import file_patches, preview_of
from gitops import services as gitops
from gitops.fleet import configured_fleet
from gitops.models import ChangeRequest
from portal.models import Job
from portal.views import visible_jobs
from tenants import access
from tenants.access import Action


class RequestQuery(serializers.Serializer[Any]):
    tenant = serializers.CharField(required=False, max_length=63)
    state = serializers.ChoiceField(choices=ResourceRequest.State.choices, required=False)
    kind = serializers.ChoiceField(choices=Kind.choices, required=False)


def _action_schema(summary: str, body: Any, description: str = "") -> Any:
    return extend_schema(
        summary=summary,
        description=description,
        parameters=[IF_MATCH],
        request=body,
        responses=write_responses(RequestDetailSerializer),
    )


@extend_schema_view(
    list=extend_schema(
        summary="Requests of the tenants you can see",
        parameters=[
            OpenApiParameter("tenant", str, description="Only this tenant's (its slug)."),
            OpenApiParameter("state", str, enum=ResourceRequest.State.values),
            OpenApiParameter("kind", str, enum=Kind.values),
        ],
        responses=read_responses(RequestSerializer, extra=(400,)),
    ),
    retrieve=extend_schema(
        summary="One request, with its events and its pull request",
        responses=read_responses(RequestDetailSerializer, detail=True),
    ),
)
class RequestViewSet(ScopedViewSet):
    """Requests for clusters, GPU shares and endpoints, in every state."""

    queryset = ResourceRequest.objects.select_related(
        "tenant", "resource", "requested_by", "decided_by", "change"
    )
    serializer_class = RequestSerializer
    detail_serializer = RequestDetailSerializer

    def list(self, request: Request) -> Response:
        query = RequestQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        wanted = query.validated_data
        rows = self.get_queryset()
        if "tenant" in wanted:
            rows = rows.filter(tenant__slug=wanted["tenant"])
        if "state" in wanted:
            rows = rows.filter(state=wanted["state"])
        if "kind" in wanted:
            rows = rows.filter(resource__kind=wanted["kind"])
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(RequestSerializer(page, many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return self.detail_response(self.get_object())

    def _act(
        self, body: type[serializers.Serializer[Any]], call: Any, *, needs: Action | None = None
    ) -> Response:
        resource_request = self.get_object()
        if needs is not None:
            # Who may never do this hears so (403), not about a field they have no use for.
            access.require(self.request.user, needs, resource_request.tenant)
        self.check_if_match(resource_request)
        data = self.input(body)
        call(resource_request, data)
        return self.detail_response(self.get_queryset().get(pk=resource_request.pk))

    @_action_schema("Submit a draft", EmptyInput)
    @action(detail=True, methods=["post"], write_scope=REQUEST)
    def submit(self, request: Request, pk: str) -> Response:
        return self._act(EmptyInput, lambda r, d: catalog.do_submit(r, acting_user=request.user))

    @_action_schema("Cancel (withdraw) a request", NoteInput)
    @action(detail=True, methods=["post"], write_scope=REQUEST)
    def cancel(self, request: Request, pk: str) -> Response:
        return self._act(
            NoteInput, lambda r, d: catalog.do_cancel(r, acting_user=request.user, note=d["note"])
        )

    @extend_schema(
        summary="What approving a request would write: the diff to review before approving",
        description="The files its pull request would change, as unified diffs against main "
        "now, the check's errors and warnings, and seen_digest: the digest of these files, "
        "which approve requires. No files once the request is decided or when it fails its "
        "check. With it, what the request would cost at current prices (cost: money as "
        "decimal strings in cost.currency; a GPU model with no price named in unpriced) and "
        "each pool's free capacity now and once it is applied (free_capacity). Anyone who may "
        "see the request may preview it (as its form previews it).",
        responses=read_responses(RequestPreviewSerializer),
    )
    @action(detail=True, methods=["get"])
    def preview(self, request: Request, pk: str) -> Response:
        resource_request = self.get_object()
        shown = preview_of(resource_request)
        check = shown.check
        body = {
            "id": resource_request.pk,
            "state": resource_request.state,
            "seen_digest": shown.digest,
            "files": [dataclasses.asdict(f) for f in file_patches(shown.changes)],
            "errors": check.errors if check else {},
            "warnings": check.warnings if check else [],
            "overcommit": bool(check and check.overcommit),
            "cost": cost_data(request_costs([resource_request])[0]),
            "free_capacity": [
                {
                    "flavor": row.flavor,
                    "unit": row.unit,
                    "capacity": row.capacity,
                    "free_now": row.free_before,
                    "free_after": row.free_after,
                    "changed": row.changed,
                }
                for row in catalog.free_pools(resource_request.tenant, configured_fleet(), check)
            ],
        }
        return Response(RequestPreviewSerializer(body).data)

    @_action_schema(
        "Approve a request (platform admins)",
        ApproveInput,
        "Approves the diff you reviewed: first GET /api/v1/requests/{id}/preview/, read its "
        "files, then send its seen_digest. Refused (400, nothing done) without it, or when "
        "main moved on and approving would now write something else. Opens the pull request "
        "(with merge: true also puts it into the merge queue). Nobody approves what they "
        "asked for themselves.",
    )
    @action(detail=True, methods=["post"], write_scope=ADMIN)
    def approve(self, request: Request, pk: str) -> Response:
        return self._act(
            ApproveInput,
            lambda r, d: catalog.do_approve(
                r,
                acting_user=request.user,
                note=d["note"],
                allow_overcommit=d["allow_overcommit"],
                seen=d["seen_digest"],
                merge=d["merge"],
            ),
            needs=Action.DECIDE,
        )

    @extend_schema(
        summary="Approve many requests at once (platform admins)",
        description="Queues one background job that approves each request in turn as "
        "approve does (each its own pull request; with merge: true, the default, into the "
        "merge queue). Refused whole, with nothing queued, when a request does not exist, "
        "no longer waits for a decision or is the caller's own. The job's progress and a "
        "line per request: GET /api/v1/jobs/{id}/.",
        request=ApproveManyInput,
        responses=write_responses(JobSerializer, code=202, if_match=False),
    )
    @action(detail=False, methods=["post"], write_scope=ADMIN, url_path="approve-many")
    def approve_many(self, request: Request) -> Response:
        data = self.input(ApproveManyInput)
        job = catalog.do_approve_many(
            data["ids"], acting_user=request.user, note=data["note"], merge=data["merge"]
        )
        return Response(
            JobSerializer(job).data,
            status=202,
            headers={"Location": f"/api/v1/jobs/{job.pk}/"},
        )

    @_action_schema("Reject a request (platform admins)", RequiredNoteInput)
    @action(detail=True, methods=["post"], write_scope=ADMIN)
    def reject(self, request: Request, pk: str) -> Response:
        return self._act(
            RequiredNoteInput,
            lambda r, d: catalog.do_reject(r, acting_user=request.user, note=d["note"]),
        )

    @_action_schema("Send a request back for changes (platform admins)", RequiredNoteInput)
    @action(detail=True, methods=["post"], write_scope=ADMIN, url_path="request-changes")
    def request_changes(self, request: Request, pk: str) -> Response:
        return self._act(
            RequiredNoteInput,
            lambda r, d: catalog.do_request_changes(r, acting_user=request.user, note=d["note"]),
        )


class ChangeQuery(serializers.Serializer[Any]):
    tenant = serializers.CharField(required=False, max_length=63, allow_blank=True)
    status = serializers.ChoiceField(choices=ChangeRequest.Status.choices, required=False)


@extend_schema_view(
    list=extend_schema(
        summary="Change requests (pull requests to the fleet repository)",
        parameters=[
            OpenApiParameter("tenant", str, description="Only this tenant's (its slug)."),
            OpenApiParameter("status", str, enum=ChangeRequest.Status.values),
        ],
        responses=read_responses(ChangeSerializer, extra=(400,)),
    ),
    retrieve=extend_schema(
        summary="One change: its files, checks, reviews and what blocks its merge",
        responses=read_responses(ChangeDetailSerializer, detail=True),
    ),
)
class ChangeViewSet(ScopedViewSet):
    queryset = ChangeRequest.objects.select_related("author", "requested_by", "merged_by")
    serializer_class = ChangeSerializer
    detail_serializer = ChangeDetailSerializer
    tenant_slug_path = "tenant_slug"
    write_scope = ADMIN

    def represent(self, obj: Any) -> dict[str, Any]:
        obj.merge_blockers = gitops.merge_blockers(obj)
        return super().represent(obj)

    def list(self, request: Request) -> Response:
        query = ChangeQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        wanted = query.validated_data
        rows = self.get_queryset()
        if "tenant" in wanted:
            rows = rows.filter(tenant_slug=wanted["tenant"])
        if "status" in wanted:
            rows = rows.filter(status=wanted["status"])
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(ChangeSerializer(page, many=True).data)

    def retrieve(self, request: Request, pk: str) -> Response:
        return self.detail_response(self.get_object())

    @extend_schema(
        summary="Review a change (platform admins)",
        parameters=[IF_MATCH],
        request=ReviewInput,
        responses=write_responses(ChangeDetailSerializer),
    )
    @action(detail=True, methods=["post"])
    def review(self, request: Request, pk: str) -> Response:
        change = self.get_object()
        self.check_if_match(change)
        data = self.input(ReviewInput)
        gitops.do_review(change, acting_user=request.user, state=data["state"], body=data["body"])
        return self.detail_response(self.get_queryset().get(pk=change.pk))

    @extend_schema(
        summary="Merge a change (platform admins)",
        parameters=[IF_MATCH],
        request=EmptyInput,
        responses=write_responses(ChangeDetailSerializer),
    )
    @action(detail=True, methods=["post"])
    def merge(self, request: Request, pk: str) -> Response:
        change = self.get_object()
        self.check_if_match(change)
        self.input(EmptyInput)
        gitops.do_merge(change, acting_user=request.user)
        return self.detail_response(self.get_queryset().get(pk=change.pk))

    @extend_schema(
        summary="Put a change into the merge queue (platform admins)",
        description="Merge when ready: the next batch checks it with the others and merges it. "
        "Its own checks need not have finished; its approvals must be there.",
        parameters=[IF_MATCH],
        request=EmptyInput,
        responses=write_responses(ChangeDetailSerializer),
    )
    @action(detail=True, methods=["post"])
    def enqueue(self, request: Request, pk: str) -> Response:
        change = self.get_object()
        self.check_if_match(change)
        self.input(EmptyInput)
        gitops.do_enqueue_merge(change, acting_user=request.user)
        return self.detail_response(self.get_queryset().get(pk=change.pk))

    @extend_schema(
        summary="Take a change out of the merge queue (platform admins)",
        parameters=[IF_MATCH],
        request=EmptyInput,
        responses=write_responses(ChangeDetailSerializer),
    )
    @action(detail=True, methods=["post"])
    def dequeue(self, request: Request, pk: str) -> Response:
        change = self.get_object()
        self.check_if_match(change)
        self.input(EmptyInput)
        gitops.do_dequeue(change, acting_user=request.user)
        return self.detail_response(self.get_queryset().get(pk=change.pk))


@extend_schema_view(
    retrieve=extend_schema(
        summary="One background job: its status, progress and log (approve-many's, say)",
        responses=read_responses(JobSerializer, detail=True),
    ),
)
class JobViewSet(ApiViewMixin, GenericViewSet):  # type: ignore[type-arg]
    """Jobs the caller started, those of tenants whose audit log they may read, and every one
    for those who operate the fleet (as the job pages); 404 for any other."""

    serializer_class = JobSerializer

    def get_queryset(self) -> QuerySet[Job]:
        if getattr(self, "swagger_fake_view", False):  # the OpenAPI document, no caller
            return Job.objects.none()
        return visible_jobs(self.request.user)

    def retrieve(self, request: Request, pk: str) -> Response:
        return Response(JobSerializer(self.get_object()).data)
