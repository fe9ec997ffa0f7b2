"""A tenant's batch jobs: list and submit, read and cancel one, read its logs.

Submitting and cancelling go to the cluster as the caller (``catalog.jobs``): a token acts with
its user's role, so a robot that is a member of the tenant runs jobs as itself. The body of a
submission is read by ``catalog.jobs.read_job``, as the form's and the declarative document's
are: an unknown field or a wrong type is a 400 naming the field, and so is every refusal of the
checks; a refusal by the cluster (RBAC, Kueue, a policy) or an unreachable one is a 400 with
its words, and nothing is kept.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ScopedViewSet, problems, read_responses, write_responses
from api.serializers import BatchJobInput, BatchJobSerializer, JobLogsSerializer
from catalog import jobs
from catalog.models import BatchJob

TENANT = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="The tenant's slug.")
NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, description="The job's name.")


class BatchJobViewSet(ScopedViewSet):
    """Batch jobs of one tenant (newest first); a name shows its newest job."""

    in_tenant = True
    serializer_class = BatchJobSerializer

    def get_queryset(self) -> Any:
        return jobs.jobs_of(self.url_tenant())

    def get_object(self) -> BatchJob:
        job = jobs.job_named(self.url_tenant(), self.kwargs["name"])
        if job is None:
            raise Http404("No such job.")
        return job

    @extend_schema(
        summary="A tenant's batch jobs",
        parameters=[TENANT],
        responses=read_responses(BatchJobSerializer),
    )
    def list(self, request: Request, slug: str) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        context = {**self.get_serializer_context(), "states": jobs.states_of(list(page))}
        return self.get_paginated_response(
            BatchJobSerializer(page, many=True, context=context).data
        )

    @extend_schema(
        summary="Submit a batch job",
        description="Fine-tuning, evaluation or batch inference on the tenant's GPU shares: "
        "checked, dry-run and created in the tenant's namespace as you (members and admins "
        "of the tenant), queued by Kueue. No pull request: it runs within the quota Git "
        "granted. A template fills the fields you leave out.",
        parameters=[TENANT],
        request=BatchJobInput,
        responses=write_responses(BatchJobSerializer, code=201, if_match=False),
    )
    def create(self, request: Request, slug: str) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        job = jobs.do_submit_job(self.url_tenant(), acting_user=request.user, data=data)
        return self.detail_response(job, code=status.HTTP_201_CREATED)

    @extend_schema(
        summary="One batch job",
        parameters=[TENANT, NAME],
        responses=read_responses(BatchJobSerializer, detail=True),
    )
    def retrieve(self, request: Request, slug: str, name: str) -> Response:
        return self.detail_response(self.get_object())

    @extend_schema(
        summary="Cancel a batch job",
        description="Deletes the Job or JobSet (its pods and Kueue's Workload go with it). "
        "Who submitted it (still a member) or a tenant admin.",
        parameters=[TENANT, NAME],
        request=None,
        responses={200: BatchJobSerializer, **problems(400, 401, 403, 404, 406)},
    )
    def destroy(self, request: Request, slug: str, name: str) -> Response:
        job = jobs.do_cancel_job(self.get_object(), acting_user=request.user)
        return self.detail_response(job)

    @extend_schema(
        summary="The last lines of a batch job's pods",
        parameters=[TENANT, NAME],
        description="Read as you, a member of the tenant. When the cluster cannot be read, "
        "`pods` is empty and `error` says why.",
        responses=read_responses(JobLogsSerializer),
    )
    def logs(self, request: Request, slug: str, name: str) -> Response:
        job = self.get_object()
        try:
            found = jobs.job_logs(job, acting_user=request.user)
        except ValidationError as exc:
            # The job is there; its pods could not be read (the cluster said why).
            return Response({"pods": [], "error": " ".join(exc.messages)})
        pods = [
            {"pod": log.pod, "phase": log.phase, "text": log.text, "error": log.error}
            for log in found
        ]
        return Response({"pods": pods, "error": ""})
