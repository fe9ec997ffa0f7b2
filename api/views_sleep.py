"""Waking a tenant's endpoint or cluster: ``POST /api/v1/tenants/<slug>/resources/<kind>/
<name>/wake/``. It opens the wake change (``catalog.idle_actions``), merged by the standing
policy once its checks pass, and answers with the request that carries it. Members and admins
of the tenant (``Action.WAKE``); a viewer hears 403, an outsider 404 whatever the method."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ScopedViewSet, write_responses
from api.serializers import NoteInput, RequestDetailSerializer
from catalog import idle_actions
from catalog.models import Kind, Resource, ResourceRequest
from tenants import access
from tenants.access import Action

TENANT = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="The tenant's slug.")
KIND = OpenApiParameter(
    "kind", str, OpenApiParameter.PATH, enum=[str(k) for k in idle_actions.SLEEPERS]
)
NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, description="Its name.")


class WakeViewSet(ScopedViewSet):
    """Wake what an idle policy (or its tenant) put to sleep."""

    in_tenant = True
    serializer_class = RequestDetailSerializer
    detail_serializer = RequestDetailSerializer
    queryset = ResourceRequest.objects.none()

    @extend_schema(
        summary="Wake an endpoint or tenant cluster",
        description="Opens the change that wakes it (rendered from main with only its asleep "
        "flag cleared); it merges without a review once its checks pass. The note, if any, is "
        "the change's reason. 400 when it is not asleep on main or another request holds it.",
        parameters=[TENANT, KIND, NAME],
        request=NoteInput,
        responses=write_responses(RequestDetailSerializer, code=202, if_match=False),
    )
    def wake(self, request: Request, slug: str, kind: str, name: str) -> Response:
        tenant = self.url_tenant()
        if kind not in (Kind.ENDPOINT, Kind.CLUSTER):
            raise Http404("Only endpoints and clusters sleep.")
        resource = Resource.objects.filter(tenant=tenant, kind=kind, name=name).first()
        if resource is None:
            raise Http404(f"The tenant has no {kind} {name!r}.")
        # Who may never wake hears so (403) before anything about the body.
        access.require(request.user, Action.WAKE, tenant)
        note = self.input(NoteInput)["note"].strip()
        reason = note or f"Woken by {request.user.get_username()} through the API."
        woken = idle_actions.wake(resource, reason=reason, actor=request.user)
        return self.detail_response(woken, code=status.HTTP_202_ACCEPTED)
