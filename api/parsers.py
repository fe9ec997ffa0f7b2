"""Request bodies the API reads besides JSON: YAML, as a file of documents is sent.

A YAML body is a stream of documents (``---`` between them) and parses to a list. It is read
with the safe loader (libyaml's when available), refusing anchors and aliases (a few lines
of aliases expand to gigabytes: the "billion laughs"), with at most ``MAX_DOCUMENTS``
documents and ``MAX_NODES`` values, and with dates left as the strings they were typed as
(JSON has no date type, and the catalog's specs hold ISO dates as strings).

Bodies over ``settings.DATA_UPLOAD_MAX_MEMORY_SIZE`` are refused with 413 before they are
parsed, JSON ones too: Django checks that limit only when a view reads ``request.body``, and
DRF's parsers read the stream instead.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

import yaml
from django.conf import settings
from rest_framework import exceptions, status
from rest_framework.parsers import BaseParser, JSONParser

MAX_DOCUMENTS = 100
# Values (scalars, lists, mappings) in one YAML body. Building them costs microseconds each
# even with libyaml, so a body of the largest size accepted, all "[1,1,1,...]", would hold a
# worker for many seconds; a hundred real documents need a few thousand.
MAX_NODES = 50_000


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


def read_limited(stream: IO[bytes] | None, meta: Mapping[str, Any]) -> bytes:
    """The whole body, refusing one over DATA_UPLOAD_MAX_MEMORY_SIZE (by its Content-Length
    when it says, otherwise by reading one byte past the limit)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    too_large = BodyTooLarge(f"The request body is larger than {limit} bytes.")
    if limit is None:
        return stream.read() if stream is not None else b""
    try:
        declared = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        raise too_large
    data = stream.read(limit + 1) if stream is not None else b""
    if len(data) > limit:
        raise too_large
    return data


def _meta(parser_context: Mapping[str, Any] | None) -> Mapping[str, Any]:
    request = (parser_context or {}).get("request")
    return getattr(request, "META", {}) if request is not None else {}


# libyaml's safe loader when PyYAML was built with it (the pure-Python one takes tens of
# seconds over a body of the largest size accepted).
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[misc,valid-type]
    """The safe loader with dates left as the strings they were typed as."""


# Resolvers are per class: a copy without the timestamp one, so 2026-01-31 stays a string.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _where(mark: Any) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _check_events(text: str) -> None:
    """One pass over the parser's events, before anything is built: no anchor or alias (a
    few lines of them expand to gigabytes, the "billion laughs"), at most MAX_DOCUMENTS
    documents and MAX_NODES values."""
    documents = nodes = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.NodeEvent) and not isinstance(event, yaml.AliasEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise exceptions.ParseError(
                    f"The YAML holds too many values: at most {MAX_NODES} are accepted."
                )
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise exceptions.ParseError(
                f"The YAML cannot be read: anchors and aliases are not accepted"
                f"{_where(event.start_mark)}."
            )
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > MAX_DOCUMENTS:
                raise exceptions.ParseError(
                    f"At most {MAX_DOCUMENTS} documents are accepted in one request."
                )


def load_documents(text: str) -> list[Any]:
    """Every document of a YAML stream (empty ones skipped); ParseError with the line and
    column of the first problem."""
    try:
        _check_events(text)
        loaded = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        where = _where(getattr(exc, "problem_mark", None))
        raise exceptions.ParseError(f"The YAML cannot be read: {problem}{where}.") from exc
    except RecursionError as exc:
        raise exceptions.ParseError("The YAML is nested too deeply.") from exc
    return [document for document in loaded if document is not None]


class YAMLParser(BaseParser):
    """``application/yaml``: a stream of documents, parsed to a list."""

    media_type = "application/yaml"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        data = read_limited(stream, _meta(parser_context))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise exceptions.ParseError("The YAML is not UTF-8 text.") from exc
        return load_documents(text)


class LegacyYAMLParser(YAMLParser):
    """``application/x-yaml``, the name many tools still send."""

    media_type = "application/x-yaml"


class LimitedJSONParser(BaseParser):
    """JSON with the same size limit as YAML bodies. Not a subclass of DRF's JSONParser:
    DRF hands that one ``request.body``, where Django's own check would raise first (an
    error page, not problem details)."""

    media_type = "application/json"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        data = read_limited(stream, _meta(parser_context))
        try:
            return JSONParser().parse(io.BytesIO(data), media_type, parser_context)
        except RecursionError as exc:
            raise exceptions.ParseError("The JSON is nested too deeply.") from exc
