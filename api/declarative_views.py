"""Declarative specs over HTTP: read, put and delete one resource as a document, list a
tenant's documents of a kind, and apply many documents at once (JSON or YAML).

The views parse and answer; ``api.declarative`` reads the documents and does the work through
the catalog's services. Statuses: 200 unchanged, 201 created, 202 a modify or decommission
request submitted, 409 another request of the resource in flight (its id in ``request``).
``POST /api/v1/apply/`` answers 200 with one result per document (``ok`` false when any
failed) and 400 only when the body holds no document that can be read.

Each kind has its own routes and its own shapes in the OpenAPI schema, built from the spec
dataclasses, and an input's schema is exactly as strict as the server (no other fields, the
same types, bounds and patterns): what the schema calls invalid is refused with 400, and
what the server refuses beyond it is the catalog's checks (quota, flavors, names taken).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import exceptions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import declarative
from api.base import ApiViewMixin
from api.declarative import Outcome, Plan
from api.parsers import MAX_DOCUMENTS, LegacyYAMLParser, LimitedJSONParser, YAMLParser
from api.problems import MEDIA_TYPE, problem
from api.serializers import RequestCostSerializer, cost_data
from billing.request_costs import spec_cost
from catalog.specs import CLASSES
from tenants import access
from tenants.access import Action
from tenants.names import TENANT_SLUG_MAX

STATUS = {
    Outcome.UNCHANGED: 200,
    Outcome.CREATED: 201,
    Outcome.MODIFIED: 202,
    Outcome.DECOMMISSION: 202,
    Outcome.CONFLICT: 409,
}
YAML_TYPES = (YAMLParser.media_type, LegacyYAMLParser.media_type)
LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NO_CONTROL = r"^[^\x00-\x1f\x7f]*$"


# --- the shapes, for the OpenAPI schema ---------------------------------------------------


# A shape that takes no other fields: the server refuses them, so the schema says so. (A
# comment, not a docstring: the schema would describe every subclass with it.)
class StrictSerializer(serializers.Serializer):
    pass


class StrictSerializerExtension(OpenApiSerializerExtension):
    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> Any:
        schema = auto_schema._map_basic_serializer(self.target, direction)
        schema["additionalProperties"] = False
        return schema


def _annotated(field: type[serializers.Field], schema: dict[str, Any], **kwargs: Any) -> Any:
    """A field with its schema given, in a class of its own: a serializer deep-copies its
    fields from their arguments, which would drop an annotation set on the instance."""
    return extend_schema_field(schema)(type(f"Annotated{field.__name__}", (field,), {}))(**kwargs)


def _enum(values: list[str], **kwargs: Any) -> Any:
    """A choice whose enum stays inline (wrapped in ``anyOf``, which the schema's enum
    naming leaves alone): the same field name has other choice sets in other shapes (a
    document's ``kind`` against a GPU share's, and the other API shapes' ``kind`` and
    ``state``), which as named components would clash."""
    schema = {"anyOf": [{"type": "string", "enum": values}]}
    return _annotated(serializers.ChoiceField, schema, choices=values, **kwargs)


def _string(longest: int, **kwargs: Any) -> Any:
    """A string of at most ``longest`` characters with no control characters, "" allowed.
    A plain field, not a CharField: one that allows blanks and has a pattern is described as
    a oneOf that "" matches twice (invalid), one that does not gets minLength 1."""
    schema = {"type": "string", "maxLength": longest, "pattern": NO_CONTROL}
    return _annotated(serializers.Field, schema, **kwargs)


def _shape(name: str, fields: dict[str, Any], base: type = StrictSerializer) -> Any:
    return type(name, (base,), fields)


def _spec_field(name: str, hint: Any, **kwargs: Any) -> serializers.Field:
    """The serializer field of one spec field, as ``declarative.parse`` checks it."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        return _spec_field(name, inner, allow_null=True, **kwargs)
    if origin is Literal:
        return _enum(list(args), **kwargs)
    if origin is tuple:
        return serializers.ListField(child=_spec_field(name, args[0]), **kwargs)
    if hint is bool:
        return serializers.BooleanField(**kwargs)
    if hint is int:
        limit = declarative.INT_LIMIT
        return serializers.IntegerField(min_value=-limit, max_value=limit, **kwargs)
    longest = declarative.MAX_LENGTH.get(name, declarative.STRING_MAX_LENGTH)
    return _string(longest, **kwargs)


def _spec_shape(kind: str) -> Any:
    cls = CLASSES[kind]
    hints = get_type_hints(cls)
    fields = {}
    for field in dataclasses.fields(cls):
        if field.name == "name":
            continue
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        fields[field.name] = _spec_field(field.name, hints[field.name], required=required)
    return _shape(f"{declarative.KIND_NAMES[kind]}Spec", fields)


REASON_FIELD = serializers.CharField(
    required=False,
    allow_blank=True,
    max_length=declarative.REASON_MAX_LENGTH,
    help_text="Why you ask, read by the platform admin who decides.",
)
Annotations = _shape("DocumentAnnotations", {declarative.REASON_ANNOTATION: REASON_FIELD})


def _metadata_fields(required: bool) -> dict[str, Any]:
    return {
        "tenant": serializers.RegexField(
            LABEL, max_length=TENANT_SLUG_MAX, required=required, help_text="The tenant's slug."
        ),
        "name": serializers.RegexField(
            LABEL, max_length=63, required=required, help_text="The resource's name."
        ),
    }


Metadata = _shape("DocumentMetadata", _metadata_fields(True))
MetadataInput = _shape(
    "DocumentMetadataInput",
    {
        **_metadata_fields(False),
        "annotations": Annotations(required=False, allow_null=True),
    },
)


class DocumentChangeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    url = serializers.CharField()


class DocumentInFlightSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.CharField()
    state = serializers.CharField()
    url = serializers.CharField()
    change = DocumentChangeSerializer(allow_null=True)
    error = serializers.CharField(allow_blank=True)


class DocumentReadinessSerializer(serializers.Serializer):
    state = _enum(["ready", "waiting", "failed"])
    message = serializers.CharField(allow_blank=True)


class DocumentStatusSerializer(serializers.Serializer):
    state = serializers.CharField(help_text="The resource's state.")
    request = DocumentInFlightSerializer(
        allow_null=True, help_text="The latest request of the resource not finished yet."
    )
    readiness = DocumentReadinessSerializer(allow_null=True)
    url = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="Model endpoints: the public URL on the tenant's gateway host (append /v1 "
        "for the OpenAI API; the tenant's gateway key goes in the x-api-key header).",
    )
    cluster_url = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="Model endpoints: the OpenAI API base inside the cluster (the KServe "
        "predictor Service; pods of the tenant's namespace call it without a key).",
    )


class DocumentDiffEntrySerializer(serializers.Serializer):
    old = serializers.JSONField(allow_null=True)
    new = serializers.JSONField(allow_null=True)


@dataclasses.dataclass(frozen=True)
class KindShapes:
    """The schema's shapes of one kind: its document as read and as sent, and the answers."""

    document: Any
    document_input: Any
    write_result: Any
    listing: Any


def _kind_shapes(kind: str) -> KindShapes:
    noun = declarative.KIND_NAMES[kind]
    spec = _spec_shape(kind)
    api_version = [declarative.API_VERSION]
    document = _shape(
        f"{noun}Document",
        {
            "apiVersion": _enum(api_version),
            "kind": _enum([noun]),
            "metadata": Metadata(),
            "spec": spec(help_text="The catalog's spec of the kind, without `name`."),
            "status": DocumentStatusSerializer(help_text="Output only."),
        },
        serializers.Serializer,
    )
    document_input = _shape(
        f"{noun}DocumentInput",
        {
            "apiVersion": _enum(api_version, required=False),
            "kind": _enum([noun], required=False),
            "metadata": MetadataInput(required=False),
            "spec": spec(help_text="The catalog's spec of the kind, without `name`."),
            "status": serializers.JSONField(
                required=False, help_text="Ignored: a document read back applies again."
            ),
        },
    )
    outcomes = [Outcome.UNCHANGED, Outcome.CREATED, Outcome.MODIFIED, Outcome.DECOMMISSION]
    write_result = _shape(
        f"{noun}WriteResult",
        {
            "outcome": _enum([o.value for o in outcomes]),
            "request": serializers.IntegerField(
                allow_null=True,
                help_text="The request submitted, or (unchanged) the one already in flight.",
            ),
            "diff": serializers.DictField(child=DocumentDiffEntrySerializer()),
            "document": document(),
            "cost": RequestCostSerializer(
                allow_null=True,
                help_text="What the request changes in a month's cost at current prices; "
                "null when unchanged.",
            ),
        },
        serializers.Serializer,
    )
    listing = _shape(f"{noun}DocumentList", {"items": document(many=True)}, serializers.Serializer)
    return KindShapes(document, document_input, write_result, listing)


SHAPES = {kind: _kind_shapes(kind) for kind in declarative.KIND_NAMES}


class ApplyBodySerializer(StrictSerializer):
    """Documents to apply, as JSON."""

    documents = serializers.ListField(
        child=serializers.JSONField(),
        min_length=1,
        max_length=MAX_DOCUMENTS,
        help_text="Documents of any kind (GpuShareDocumentInput, TenantClusterDocumentInput, "
        "ModelEndpointDocumentInput, with apiVersion, kind and metadata). Each is read on "
        "its own: one that is not a document is an error in its result, not of the request.",
    )


class ApplyResultSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="The document's place in the body, from 0.")
    kind = serializers.CharField(allow_null=True)
    tenant = serializers.CharField(allow_null=True)
    name = serializers.CharField(allow_null=True)
    outcome = _enum([o.value for o in Outcome])
    status = serializers.IntegerField(
        help_text="The HTTP status the resource's own URL would have answered."
    )
    request = serializers.IntegerField(allow_null=True)
    diff = serializers.DictField(child=DocumentDiffEntrySerializer())
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
    detail = serializers.CharField(allow_blank=True)
    cost = RequestCostSerializer(
        allow_null=True,
        help_text="A create, modify or decommission (dry run or not): what it changes in a "
        "month's cost at current prices; null for anything else.",
    )


class ApplyResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField(help_text="False when any document failed or conflicted.")
    dry_run = serializers.BooleanField()
    results = ApplyResultSerializer(many=True)


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
        404: "No such tenant (or not yours), or no such resource.",
        409: "Another request of the resource is in flight; `request` is its id.",
        413: "The body is larger than the server accepts.",
        415: "Not JSON (or YAML where accepted).",
    }
    return {
        (code, MEDIA_TYPE): OpenApiResponse(DeclarativeProblemSerializer, described[code])
        for code in codes
    }


# --- helpers ------------------------------------------------------------------------------


def _written(result: Plan, user: Any, *, status: int | None = None) -> Response:
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
        "cost": _cost(result, user),
    }
    return Response(body, status=status or STATUS[result.outcome])


def _flag(value: str | None, name: str) -> bool:
    """An OpenAPI boolean query parameter: true or false, nothing else."""
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    raise exceptions.ValidationError({name: ["Must be true or false."]})


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


PRICED = (Outcome.CREATED, Outcome.MODIFIED, Outcome.DECOMMISSION)


def _cost(result: Plan, user: Any) -> Any:
    """What the planned request changes in a month's cost, as the request preview says it."""
    if result.outcome not in PRICED:
        return None
    resource = result.resource
    document = result.document
    tenant = resource.tenant if resource else declarative.tenant_for(user, document.tenant)
    running = resource.spec or None if resource else None
    wanted = None if result.outcome == Outcome.DECOMMISSION else document.spec
    return RequestCostSerializer(cost_data(spec_cost(tenant, document.kind, wanted, running))).data


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
        "cost": None,
    }
    try:
        if isinstance(data, dict) and data.get("kind") == declarative.JOB_KIND:
            job = declarative.plan_job(data, user) if dry_run else declarative.apply_job(data, user)
            out.update(
                outcome=job.outcome.value,
                status=STATUS[job.outcome],
                diff=job.diff,
                detail=job.detail,
            )
            return out
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
        cost=_cost(result, user),
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


class DeclarativeView(ApiViewMixin, APIView):
    """The body size limit and the token use log (ApiViewMixin), and writes that ask."""

    write_scope = "request"
    parser_classes = [LimitedJSONParser]


TENANT = OpenApiParameter("tenant", str, OpenApiParameter.PATH, description="The tenant's slug.")
NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, description="The resource's name.")
REASON = OpenApiParameter(
    "reason",
    {"type": "string", "maxLength": declarative.REASON_MAX_LENGTH, "pattern": "^[^\\u0000]*$"},
    OpenApiParameter.QUERY,
    required=False,
    description="Why (read by the platform admin who decides), at most "
    f"{declarative.REASON_MAX_LENGTH} characters.",
)

DRY_RUN = OpenApiParameter(
    "dry_run",
    OpenApiTypes.BOOL,
    OpenApiParameter.QUERY,
    required=False,
    description="Plan only: what would happen, nothing written.",
)


class DocumentListView(DeclarativeView):
    """A tenant's resources of one kind, as documents (a subclass per kind)."""

    kind: ClassVar[str] = ""

    def get(self, request: Request, tenant: str) -> Response:
        found = declarative.tenant_for(request.user, tenant)
        listed = declarative.listed(found, self.kind)
        return Response({"items": [declarative.export(resource) for resource in listed]})


class DocumentView(DeclarativeView):
    """One resource as a document: read, put, delete (a subclass per kind)."""

    kind: ClassVar[str] = ""

    def get(self, request: Request, tenant: str, name: str) -> Response:
        found = declarative.tenant_for(request.user, tenant)
        resource = declarative.held_resource(found, self.kind, name)
        if resource is None:
            raise Http404("No such resource.")
        return Response(declarative.export(resource))

    def put(self, request: Request, tenant: str, name: str) -> Response:
        found = declarative.tenant_for(request.user, tenant)
        access.require(request.user, Action.REQUEST, found)
        document = declarative.parse(request.data, kind=self.kind, tenant=found.slug, name=name)
        return _written(declarative.apply(document, request.user), request.user)

    def delete(self, request: Request, tenant: str, name: str) -> Response:
        reason = request.query_params.get("reason", "")
        dry_run = _flag(request.query_params.get("dry_run"), "dry_run")
        act = declarative.plan_delete if dry_run else declarative.delete
        result = act(tenant, self.kind, name, request.user, reason=reason)
        return _written(result, request.user, status=200 if dry_run else None)


def _kind_views(kind: str, plural: str) -> tuple[type[APIView], type[APIView]]:
    """The list and the resource view of one kind, each with its own schema."""
    noun = declarative.KIND_NAMES[kind]
    shapes = SHAPES[kind]
    tags = ["declarative"]
    list_view = extend_schema_view(
        get=extend_schema(
            operation_id=f"declarative_{plural}_list",
            tags=tags,
            summary=f"A tenant's {noun} resources as documents",
            parameters=[TENANT],
            responses={200: shapes.listing, **_problems(401, 403, 404)},
        )
    )(type(f"{noun}ListView", (DocumentListView,), {"kind": kind}))
    detail_view = extend_schema_view(
        get=extend_schema(
            operation_id=f"declarative_{plural}_get",
            tags=tags,
            summary=f"One {noun} as a document, with its status",
            parameters=[TENANT, NAME],
            responses={200: shapes.document, **_problems(401, 403, 404)},
        ),
        put=extend_schema(
            operation_id=f"declarative_{plural}_put",
            tags=tags,
            summary=f"Make the {noun} what the document says",
            description="200: unchanged, nothing written (the spec is what runs or what a "
            "request in flight asks for). 201: a create request was submitted. 202: a modify "
            "request was submitted. apiVersion, kind and metadata may be left out (they come "
            "from the URL) and must match it when given; the reason goes in the annotation "
            f"`{declarative.REASON_ANNOTATION}`.",
            parameters=[TENANT, NAME],
            request=shapes.document_input,
            responses={
                200: shapes.write_result,
                201: shapes.write_result,
                202: shapes.write_result,
                **_problems(400, 401, 403, 404, 409, 413, 415),
            },
        ),
        delete=extend_schema(
            operation_id=f"declarative_{plural}_delete",
            tags=tags,
            summary=f"Ask to decommission the {noun}",
            description="202: a decommission request was submitted. 200 (with "
            "`?dry_run=true`): it would be, nothing written. 409: another request of it is "
            "in flight, or it does not run yet.",
            parameters=[TENANT, NAME, REASON, DRY_RUN],
            responses={
                200: shapes.write_result,
                202: shapes.write_result,
                **_problems(400, 401, 403, 404, 409),
            },
        ),
    )(type(f"{noun}View", (DocumentView,), {"kind": kind}))
    return list_view, detail_view


KIND_VIEWS = {plural: _kind_views(kind, plural) for plural, kind in declarative.PLURALS.items()}


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
        parameters=[DRY_RUN],
        request={
            "application/json": ApplyBodySerializer,
            # A stream of YAML documents (``---`` between them), each read on its own.
            "application/yaml": OpenApiTypes.ANY,
            "application/x-yaml": OpenApiTypes.ANY,
        },
        responses={200: ApplyResponseSerializer, **_problems(400, 401, 403, 413, 415)},
    )
    def post(self, request: Request) -> Response:
        dry_run = _flag(request.query_params.get("dry_run"), "dry_run")
        documents = _documents(request)
        results = [_result(i, data, request.user, dry_run) for i, data in enumerate(documents)]
        ok = all(r["outcome"] not in (Outcome.ERROR, Outcome.CONFLICT) for r in results)
        return Response({"ok": ok, "dry_run": dry_run, "results": results})
