"""Request bodies the API reads besides JSON: YAML, as a file of documents is sent.

A YAML body is a stream of documents (``---`` between them) and parses to a list. It is read
with the safe loader, refusing anchors and aliases (a few lines of aliases expand to
gigabytes: the "billion laughs"), with at most ``MAX_DOCUMENTS`` documents, and with dates
left as the strings they were typed as (JSON has no date type, and the catalog's specs hold
ISO dates as strings). Bodies over ``settings.DATA_UPLOAD_MAX_MEMORY_SIZE`` are refused with
413 before they are parsed, JSON ones too: Django checks that limit only when a view reads
``request.body``, and DRF's parsers read the stream instead.
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


class _NoAliasLoader(yaml.SafeLoader):
    """The safe loader without anchors, aliases or implicit timestamps."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors and aliases are not accepted",
                event.start_mark,
            )
        return super().compose_node(parent, index)


# Resolvers are per class: a copy without the timestamp one, so 2026-01-31 stays a string.
_NoAliasLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_documents(text: str) -> list[Any]:
    """Every document of a YAML stream (empty ones skipped); ParseError with the line and
    column of the first problem."""
    documents: list[Any] = []
    try:
        for document in yaml.load_all(text, Loader=_NoAliasLoader):
            if document is None:
                continue
            if len(documents) == MAX_DOCUMENTS:
                raise exceptions.ParseError(
                    f"At most {MAX_DOCUMENTS} documents are accepted in one request."
                )
            documents.append(document)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise exceptions.ParseError(f"The YAML cannot be read: {problem}{where}.") from exc
    except RecursionError as exc:
        raise exceptions.ParseError("The YAML is nested too deeply.") from exc
    return documents


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
