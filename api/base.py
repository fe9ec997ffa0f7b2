"""What every API view shares: the queryset restricted to the caller, pagination, ETags,
the body size limit, the token use log and the error responses of the OpenAPI document.

No view filters by tenant itself: ``ScopedViewSet.get_queryset`` narrows the view's
queryset to the tenants in which the caller may take ``view_action`` (``tenants.access``),
and ``tenant_or_404`` resolves a tenant in a URL the same way, so a non-member gets the 404
of something that is not there.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar

from django.conf import settings
from django.db.models import Model, QuerySet
from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from api.auth import TOKEN_ATTRIBUTE
from api.permissions import REQUEST
from api.problems import PreconditionFailed
from api.tokens import record_use
from tenants.access import Action, allowed, platform_roles, tenants_where
from tenants.models import Tenant


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is larger than the API accepts."
    default_code = "payload_too_large"


class Pagination(PageNumberPagination):
    """``?page=`` (from 1) and ``?page_size=`` (default 50, at most 200)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


# --- problem details in the schema ---------------------------------------------------------


class ProblemSerializer(serializers.Serializer[Any]):
    """RFC 9457 problem details, as every error of the API answers."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Bad input: field path to messages.",
    )


PROBLEM_TEXT = {
    400: "Bad input (malformed JSON, a wrong type, an unknown field, a refused value).",
    401: "No valid credentials: a missing, unknown, expired or revoked token.",
    403: "Signed in, but the role or the token's scope does not allow this.",
    404: "Not found, or not yours to see (a tenant you are not a member of).",
    406: "The Accept header asks for something other than JSON.",
    409: "The resource's state does not allow this now.",
    412: "If-Match does not match the resource's current ETag.",
    413: "The request body is too large.",
    415: "The body is not JSON.",
}
READ_ERRORS = (401, 403, 404, 406)
WRITE_ERRORS = (400, 401, 403, 404, 406, 412, 413, 415)


def problems(*codes: int) -> dict[int, OpenApiResponse]:
    """Schema responses for these error statuses, each as problem details."""
    return {
        code: OpenApiResponse(response=ProblemSerializer, description=PROBLEM_TEXT[code])
        for code in codes
    }


def read_responses(ok: Any, *, detail: bool = False, extra: tuple[int, ...] = ()) -> dict:
    out: dict[int, Any] = {200: ok, **problems(*READ_ERRORS, *extra)}
    if detail:
        out[304] = OpenApiResponse(description="Not modified: If-None-Match matched the ETag.")
    return out


def write_responses(ok: Any, *, code: int = 200, if_match: bool = True) -> dict:
    """A write's answers; 412 only where the call takes If-Match."""
    return {code: ok, **problems(*(c for c in WRITE_ERRORS if if_match or c != 412))}


IF_MATCH = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    description="The ETag you read; 412, and nothing done, when the resource changed since.",
)


# --- ETags --------------------------------------------------------------------------------


def etag_of(data: Any) -> str:
    """A strong ETag of the representation (stable: keys sorted)."""
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return '"' + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32] + '"'


def _tags(header: str, *, weak: bool) -> set[str]:
    """The entity tags of a header. If-None-Match compares weakly (``W/"x"`` matches
    ``"x"``); If-Match strongly, so a weak tag there never matches (RFC 9110)."""
    tags = {tag.strip() for tag in header.split(",") if tag.strip()}
    return {tag.removeprefix("W/") for tag in tags} if weak else tags


# --- the base view --------------------------------------------------------------------------


class ApiViewMixin:
    """The body size limit and the token use log, for every API view (schema included)."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # DRF reads a JSON body from the stream, past Django's DATA_UPLOAD_MAX_MEMORY_SIZE
        # check (which guards request.body), so the limit is applied here.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        super().initial(request, *args, **kwargs)  # type: ignore[misc]

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)  # type: ignore[misc]
        raw = getattr(request, "_request", request)
        token = getattr(raw, TOKEN_ATTRIBUTE, None)
        if token is not None:
            record_use(
                token,
                method=raw.method or "",
                path=raw.path,
                status=response.status_code,
                ip=raw.META.get("REMOTE_ADDR") or None,
            )
        return response


class ScopedViewSet(ApiViewMixin, GenericViewSet):  # type: ignore[type-arg]
    """A viewset whose queryset holds only what the caller may see.

    ``tenant_path`` leads from the model to its Tenant (``"pk"`` for Tenant itself);
    ``tenant_slug_path`` to a tenant's slug, for models that keep the slug (a change); a
    model with a slug path and no tenant (a platform change) is shown only to callers whose
    platform role allows ``view_action`` everywhere.
    """

    pagination_class = Pagination
    # The scope a token needs for this view's writes (an action may set its own).
    write_scope: str = REQUEST
    tenant_path: ClassVar[str] = "tenant"
    tenant_slug_path: ClassVar[str] = ""
    view_action: ClassVar[Action] = Action.VIEW
    # Routed under /tenants/<slug>/: the tenant is resolved before anything else, so an
    # outsider gets 404 whatever the method (never a 405 that confirms the URL).
    in_tenant: ClassVar[bool] = False
    # For ``If-Match`` and ``If-None-Match``: the serializer of the detail representation.
    detail_serializer: ClassVar[type[serializers.BaseSerializer[Any]] | None] = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if self.in_tenant and "slug" in self.kwargs:
            self.url_tenant()

    def url_tenant(self) -> Tenant:
        """The tenant of the URL (``slug``), resolved once per call."""
        found = getattr(self, "_url_tenant", None)
        if found is None:
            found = self._url_tenant = self.tenant_or_404(self.kwargs["slug"])
        return found

    def everywhere(self) -> bool:
        """Whether the caller's platform role allows ``view_action`` in every tenant."""
        return allowed(self.view_action, platform=platform_roles(self.request.user), role=None)

    def restrict(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.everywhere():
            return queryset
        tenants = tenants_where(self.request.user, self.view_action)
        if self.tenant_slug_path:
            return queryset.filter(**{f"{self.tenant_slug_path}__in": tenants.values("slug")})
        return queryset.filter(**{f"{self.tenant_path}__in": tenants})

    def get_queryset(self) -> QuerySet[Any]:
        assert self.queryset is not None
        return self.restrict(self.queryset.all())

    # The representation that ETags are computed from.
    def represent(self, obj: Model) -> dict[str, Any]:
        serializer_class = self.detail_serializer or self.get_serializer_class()
        return dict(serializer_class(obj, context=self.get_serializer_context()).data)

    def detail_response(self, obj: Model, *, code: int = 200) -> Response:
        """The detail representation with its ETag; 304 when If-None-Match has it."""
        data = self.represent(obj)
        tag = etag_of(data)
        wanted = _tags(self.request.headers.get("If-None-Match", ""), weak=True)
        if (
            code == 200
            and self.request.method in ("GET", "HEAD")
            and ("*" in wanted or tag in wanted)
        ):
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers={"ETag": tag})
        return Response(data, status=code, headers={"ETag": tag})

    def check_if_match(self, obj: Model) -> None:
        """412 when the caller's If-Match names another version of ``obj``."""
        wanted = self.request.headers.get("If-Match", "")
        if not wanted:
            return
        tags = _tags(wanted, weak=False)
        if "*" not in tags and etag_of(self.represent(obj)) not in tags:
            raise PreconditionFailed()

    def tenant_or_404(self, slug: str) -> Tenant:
        """The tenant of a URL, if the caller may see it; else 404 (the action itself is the
        service's to refuse, with a 403 that says who may)."""
        tenant = tenants_where(self.request.user, Action.VIEW).filter(slug=slug).first()
        if tenant is None:
            raise Http404("No such tenant.")
        return tenant

    def input(self, serializer_class: type[serializers.Serializer[Any]]) -> dict[str, Any]:
        """The validated body (400 problem details when it is not what the action takes)."""
        serializer = serializer_class(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)
