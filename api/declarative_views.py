"""Declarative specs over HTTP: read, put and delete one resource as a document, list a
tenant's documents of a kind, and apply many documents at once (JSON or YAML).

The views parse and answer; ``api.declarative`` reads the documents and does the work through
the catalog's services. Statuses: 200 unchanged, 201 created, 202 a modify or decommission
request submitted, 409 another request of the resource in flight (its id in ``request``).
``POST /api/v1/apply/`` answers 200 with one result per document (``ok`` false when any
failed) and 400 only when the body holds no document that can be read.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import declarative
from api.declarative import Outcome, Plan
from api.parsers import MAX_DOCUMENTS, LegacyYAMLParser, LimitedJSONParser, YAMLParser
from api.problems import MEDIA_TYPE, problem
from tenants import access
from tenants.access import Action

STATUS = {
    Outcome.UNCHANGED: 200,
    Outcome.CREATED: 201,
    Outcome.MODIFIED: 202,
    Outcome.DECOMMISSION: 202,
    Outcome.CONFLICT: 409,
}
YAML_TYPES = (YAMLParser.media_type, LegacyYAMLParser.media_type)


# --- the shapes, for the OpenAPI schema ---------------------------------------------------


class MetadataSerializer(serializers.Serializer):
    tenant = serializers.CharField(help_text="The tenant's slug.")
    name = serializers.CharField(help_text="The resource's name, a DNS-1123 label.")
    annotations = serializers.DictField(
        child=serializers.CharField(),
        required=False,
        help_text=f"Only `{declarative.REASON_ANNOTATION}`: why you ask (at most "
        f"{declarative.REASON_MAX_LENGTH} characters), read by the admin who decides.",
    )


class ChangeStatusSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    url = serializers.CharField()


class RequestStatusSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.CharField()
    state = serializers.CharField()
    url = serializers.CharField()
    change = ChangeStatusSerializer(allow_null=True)
    error = serializers.CharField(allow_blank=True)


class ReadinessSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=["ready", "waiting", "failed"])
    message = serializers.CharField(allow_blank=True)


class DocumentStatusSerializer(serializers.Serializer):
    state = serializers.CharField(help_text="The resource's state.")
    request = RequestStatusSerializer(
        allow_null=True, help_text="The latest request of the resource not finished yet."
    )
    readiness = ReadinessSerializer(allow_null=True)
    url = serializers.CharField(
        required=False, allow_blank=True, help_text="Model endpoints: the public URL."
    )


class DocumentSerializer(serializers.Serializer):
    """A document as the portal writes it (with its output-only ``status``)."""

    apiVersion = serializers.ChoiceField(choices=[declarative.API_VERSION])
    kind = serializers.ChoiceField(choices=list(declarative.KINDS))
    metadata = MetadataSerializer()
    spec = serializers.DictField(help_text="The catalog's spec of the kind, without `name`.")
    status = DocumentStatusSerializer()


class DocumentInputSerializer(serializers.Serializer):
    """A document as sent. On a resource's URL, apiVersion, kind and metadata may be left out
    (they come from the URL) and must match it when given; ``status`` is ignored."""

    apiVersion = serializers.ChoiceField(choices=[declarative.API_VERSION], required=False)
    kind = serializers.ChoiceField(choices=list(declarative.KINDS), required=False)
    metadata = MetadataSerializer(required=False)
    spec = serializers.DictField(help_text="The catalog's spec of the kind, without `name`.")
    status = serializers.DictField(required=False, help_text="Ignored (output only).")


class DiffEntrySerializer(serializers.Serializer):
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)


class WriteResultSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(
        choices=[Outcome.UNCHANGED, Outcome.CREATED, Outcome.MODIFIED, Outcome.DECOMMISSION]
    )
    request = serializers.IntegerField(
        allow_null=True,
        help_text="The request submitted, or (unchanged) the one already in flight.",
    )
    diff = serializers.DictField(child=DiffEntrySerializer())
    document = DocumentSerializer()


class ApplyRequestSerializer(serializers.Serializer):
    documents = serializers.ListField(
        child=DocumentInputSerializer(), min_length=1, max_length=MAX_DOCUMENTS
    )


class ApplyResultSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="The document's place in the body, from 0.")
    kind = serializers.CharField(allow_null=True)
    tenant = serializers.CharField(allow_null=True)
    name = serializers.CharField(allow_null=True)
    outcome = serializers.ChoiceField(choices=[o.value for o in Outcome])
    status = serializers.IntegerField(
        help_text="The HTTP status the resource's own URL would have answered."
    )
    request = serializers.IntegerField(allow_null=True)
    diff = serializers.DictField(child=DiffEntrySerializer())
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
    detail = serializers.CharField(allow_blank=True)


class ApplyResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField(help_text="False when any document failed or conflicted.")
    dry_run = serializers.BooleanField()
    results = ApplyResultSerializer(many=True)


class DocumentListSerializer(serializers.Serializer):
    items = DocumentSerializer(many=True)


class DeclarativeProblemSerializer(serializers.Serializer):
    """RFC 9457 problem details (``api.problems``)."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False
    )
    request = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="409: the request in flight that must finish first.",
    )


def _problems(*codes: int) -> dict[Any, Any]:
    described = {
        400: "Bad input: `errors` maps each dotted path to its messages; nothing was written.",
        401: "Not signed in.",
        403: "Not signed in, a token without the scope, or a role that may not do this.",
        404: "No such tenant (or not yours), kind or resource.",
        409: "Another request of the resource is in flight; `request` is its id.",
        413: "The body is larger than the server accepts.",
        415: "Not JSON (or YAML where accepted).",
    }
    return {
        (code, MEDIA_TYPE): OpenApiResponse(DeclarativeProblemSerializer, described[code])
        for code in codes
    }


# --- helpers ------------------------------------------------------------------------------


def _kind(plural: str) -> str:
    if plural not in declarative.PLURALS:
        raise Http404("No such kind of resource.")
    return declarative.PLURALS[plural]


def _written(result: Plan) -> Response:
    request_id = result.request.pk if result.request is not None else None
    if result.outcome == Outcome.CONFLICT:
        response = problem(409, result.detail, kind="conflict")
        response.data["request"] = request_id
        return response
    assert result.resource is not None
    result.resource.refresh_from_db()
    body = {
        "outcome": result.outcome.value,
        "request": request_id,
        "diff": result.diff,
        "document": declarative.export(result.resource),
    }
    return Response(body, status=STATUS[result.outcome])


def _flag(value: str | None, name: str) -> bool:
    if value is None or value.lower() in ("", "0", "false", "no"):
        return False
    if value.lower() in ("1", "true", "yes"):
        return True
    raise exceptions.ValidationError({name: ["Must be true or false."]})


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _result(index: int, data: Any, user: Any, dry_run: bool) -> dict[str, Any]:
    """One document's part of an apply: independent of the others (its own transaction)."""
    metadata = data.get("metadata") if isinstance(data, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    out: dict[str, Any] = {
        "index": index,
        "kind": _text(data.get("kind")) if isinstance(data, dict) else None,
        "tenant": _text(metadata.get("tenant")),
        "name": _text(metadata.get("name")),
        "outcome": Outcome.ERROR.value,
        "status": 400,
        "request": None,
        "diff": {},
        "errors": {},
        "detail": "",
    }
    try:
        document = declarative.parse(data)
        result = declarative.plan(document, user) if dry_run else declarative.apply(document, user)
    except ValidationError as exc:
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
        first = next(iter(errors.items()))
        out["errors"] = errors
        out["detail"] = f"{first[0]}: {first[1][0]}" if first[0] else first[1][0]
        return out
    except PermissionDenied as exc:
        out.update(status=403, detail=str(exc), errors={"": [str(exc)]})
        return out
    except Http404:
        # As the tenant's own URL answers: nothing says whether it exists.
        out.update(status=404, detail="Not found.", errors={"metadata.tenant": ["Not found."]})
        return out
    out.update(
        outcome=result.outcome.value,
        status=STATUS[result.outcome],
        request=result.request.pk if result.request is not None else None,
        diff=result.diff,
        detail=result.detail,
    )
    return out


def _documents(request: Request) -> list[Any]:
    data = request.data
    if not data:
        raise exceptions.ValidationError({"documents": ["Send at least one document."]})
    if request.content_type.split(";")[0].strip() in YAML_TYPES:
        documents = data
    elif isinstance(data, dict) and set(data) == {"documents"}:
        documents = data["documents"]
    else:
        raise exceptions.ValidationError(
            {"documents": ['Send {"documents": [...]} as JSON, or YAML documents.']}
        )
    if not isinstance(documents, list) or not documents:
        raise exceptions.ValidationError({"documents": ["Send at least one document."]})
    if len(documents) > MAX_DOCUMENTS:
        raise exceptions.ValidationError(
            {"documents": [f"At most {MAX_DOCUMENTS} documents are accepted in one request."]}
        )
    return documents


# --- the views ----------------------------------------------------------------------------


class DeclarativeView(APIView):
    write_scope = "request"
    parser_classes = [LimitedJSONParser]


PLURAL = OpenApiParameter(
    "plural", str, OpenApiParameter.PATH, enum=list(declarative.PLURALS), description="The kind."
)
TENANT = OpenApiParameter("tenant", str, OpenApiParameter.PATH, description="The tenant's slug.")
NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, description="The resource's name.")


class DocumentListView(DeclarativeView):
    @extend_schema(
        operation_id="declarative_list",
        tags=["declarative"],
        summary="A tenant's resources of one kind, as documents",
        parameters=[TENANT, PLURAL],
        responses={200: DocumentListSerializer, **_problems(401, 403, 404)},
    )
    def get(self, request: Request, tenant: str, plural: str) -> Response:
        kind = _kind(plural)
        found = declarative.tenant_for(request.user, tenant)
        items = [declarative.export(resource) for resource in declarative.listed(found, kind)]
        return Response({"items": items})


class DocumentView(DeclarativeView):
    @extend_schema(
        operation_id="declarative_get",
        tags=["declarative"],
        summary="One resource as a document, with its status",
        parameters=[TENANT, PLURAL, NAME],
        responses={200: DocumentSerializer, **_problems(401, 403, 404)},
    )
    def get(self, request: Request, tenant: str, plural: str, name: str) -> Response:
        kind = _kind(plural)
        found = declarative.tenant_for(request.user, tenant)
        resource = declarative.held_resource(found, kind, name)
        if resource is None:
            raise Http404("No such resource.")
        return Response(declarative.export(resource))

    @extend_schema(
        operation_id="declarative_put",
        tags=["declarative"],
        summary="Make the resource what the document says (a create or modify request)",
        description="200: unchanged, nothing written (the spec is what runs or what a request "
        "in flight asks for). 201: a create request was submitted. 202: a modify request was "
        "submitted. The reason goes in the annotation "
        f"`{declarative.REASON_ANNOTATION}`.",
        parameters=[TENANT, PLURAL, NAME],
        request=DocumentInputSerializer,
        responses={
            200: WriteResultSerializer,
            201: WriteResultSerializer,
            202: WriteResultSerializer,
            **_problems(400, 401, 403, 404, 409, 413, 415),
        },
    )
    def put(self, request: Request, tenant: str, plural: str, name: str) -> Response:
        kind = _kind(plural)
        found = declarative.tenant_for(request.user, tenant)
        access.require(request.user, Action.REQUEST, found)
        document = declarative.parse(request.data, kind=kind, tenant=found.slug, name=name)
        return _written(declarative.apply(document, request.user))

    @extend_schema(
        operation_id="declarative_delete",
        tags=["declarative"],
        summary="Ask to decommission the resource",
        description="202: a decommission request was submitted.",
        parameters=[
            TENANT,
            PLURAL,
            NAME,
            OpenApiParameter(
                "reason",
                str,
                OpenApiParameter.QUERY,
                required=False,
                description="Why (read by the admin who decides).",
            ),
        ],
        responses={202: WriteResultSerializer, **_problems(400, 401, 403, 404, 409)},
    )
    def delete(self, request: Request, tenant: str, plural: str, name: str) -> Response:
        kind = _kind(plural)
        reason = request.query_params.get("reason", "")
        return _written(declarative.delete(tenant, kind, name, request.user, reason=reason))


class ApplyView(DeclarativeView):
    parser_classes = [LimitedJSONParser, YAMLParser, LegacyYAMLParser]

    @extend_schema(
        operation_id="declarative_apply",
        tags=["declarative"],
        summary="Apply many documents; ?dry_run=true only plans",
        description="Each document on its own: one that fails does not stop the others, and "
        "each applied document is its own transaction. 200 with a result per document, `ok` "
        "false when any failed or conflicted; 400 when the body holds no readable document. "
        f"At most {MAX_DOCUMENTS} documents. A dry run writes nothing and reports what "
        "applying would do (the same outcomes, diffs and errors).",
        parameters=[
            OpenApiParameter(
                "dry_run",
                OpenApiTypes.BOOL,
                OpenApiParameter.QUERY,
                required=False,
                description="Plan only: what would happen, nothing written.",
            )
        ],
        request={
            "application/json": ApplyRequestSerializer,
            "application/yaml": OpenApiTypes.STR,
            "application/x-yaml": OpenApiTypes.STR,
        },
        responses={200: ApplyResponseSerializer, **_problems(400, 401, 403, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        dry_run = _flag(request.query_params.get("dry_run"), "dry_run")
        documents = _documents(request)
        results = [_result(i, data, request.user, dry_run) for i, data in enumerate(documents)]
        ok = all(r["outcome"] not in (Outcome.ERROR, Outcome.CONFLICT) for r in results)
        return Response({"ok": ok, "dry_run": dry_run, "results": results})
