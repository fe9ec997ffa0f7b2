"""Safe, deterministic YAML out of plain data.

Renderers build Kubernetes objects as dicts; this module is the only place that turns them into
text. Output is byte-identical for equal input:

- top-level keys come in the order ``apiVersion, kind, metadata, spec`` and then the rest
  sorted; ``metadata`` starts with ``name, namespace, labels, annotations``; every other
  mapping is sorted by key (as ``kubectl get -o yaml`` does), so the order in which a renderer
  happened to insert keys never shows in Git;
- lists keep their order (in Kubernetes it usually means something);
- block style, no anchors or aliases even when one dict is reused in two places, and a line
  width large enough that long strings (JMESPath, CEL) are never folded.

``yaml.SafeDumper`` quotes every string that would read back as another type (``yes``,
``null``, ``0x1``, ``1e3``, ``~``) or as YAML syntax (``*a``, ``&b``, ``- x``, ``key: v``), so
user input always round-trips as the same string. The pure-Python dumper is used on purpose:
the C emitter is not guaranteed to produce the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

TOP_LEVEL_ORDER = ("apiVersion", "kind", "metadata", "spec")
METADATA_ORDER = ("name", "namespace", "labels", "annotations")
# Wider than any line we write: PyYAML folds plain and quoted scalars at this width.
_WIDTH = 1 << 16


class _Dumper(yaml.SafeDumper):
    """SafeDumper that never emits anchors/aliases and writes multi-line text as ``|``."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # A literal block keeps embedded YAML (a ConfigMap value) readable in a diff. The emitter
    # falls back to a quoted style by itself when a block cannot represent the text exactly.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def _ordered(mapping: Mapping[str, Any], first: tuple[str, ...]) -> dict[str, Any]:
    out = {key: canonical(mapping[key]) for key in first if key in mapping}
    for key in sorted(k for k in mapping if k not in first):
        out[key] = canonical(mapping[key])
    return out


def canonical(value: Any) -> Any:
    """A copy of ``value`` with every mapping in canonical key order and tuples as lists."""
    if isinstance(value, Mapping):
        return _ordered(value, ())
    if isinstance(value, list | tuple):
        return [canonical(item) for item in value]
    return value


def canonical_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``canonical`` for one document: Kubernetes top-level and metadata order first."""
    out = _ordered(obj, TOP_LEVEL_ORDER)
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        out["metadata"] = _ordered(metadata, METADATA_ORDER)
    return out


def dump_value(value: Any) -> str:
    """One YAML document (no ``---``) for a value that is not a Kubernetes object, such as
    the text of a ConfigMap key or a JSON6902 patch."""
    text: str = yaml.dump(
        canonical(value),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_WIDTH,
    )
    return text


def dump_documents(objs: Iterable[Mapping[str, Any]]) -> bytes:
    """Objects as a multi-document YAML file, ``---`` between documents, UTF-8."""
    docs = [
        yaml.dump(
            canonical_object(obj),
            Dumper=_Dumper,
            sort_keys=False,
            default_flow_style=False,
            allow_unicode=True,
            width=_WIDTH,
        )
        for obj in objs
    ]
    return "---\n".join(docs).encode("utf-8")


def load_documents(data: bytes) -> list[Any]:
    """The documents of a file written by ``dump_documents`` (empty documents dropped)."""
    return [doc for doc in yaml.safe_load_all(data.decode("utf-8")) if doc is not None]
