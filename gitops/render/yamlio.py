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
user input always round-trips as the same string.

The bytes are those of PyYAML's pure-Python emitter (``yaml.SafeDumper``), but most documents
go through libyaml's (``yaml.CSafeDumper``, same representer and settings), about ten times
faster: emitting YAML was about half the cost of an approval. Evidence (December 2026, PyYAML
6.0.4 with its bundled libyaml): both emitters compared on every document the gitops and
catalog tests render (21,914 documents, 782 distinct) and the demo seed renders (239), and on
80,000 generated trees of awkward strings. They write the same bytes except for:

- a character outside the Basic Multilingual Plane (an emoji): libyaml escapes it
  (``"\\U0001F680"``), PyYAML writes it as it is;
- the Unicode line breaks NEL, LS and PS (U+0085, U+2028, U+2029): libyaml double-quotes
  with escapes, PyYAML single-quotes with a folded break;
- a lone surrogate: PyYAML escapes it, libyaml fails;
- an empty or multi-line mapping key: PyYAML writes it as a complex key (``? ''``); a
  non-ASCII key over 128 bytes (PyYAML counts characters, libyaml bytes);
- text ending in an empty line (a ``|+`` block), and a document that is a bare scalar: the
  two end the document differently (``...``);
- a double-quoted line longer than the width: they fold it at different spaces.

``_python_only`` spots these with one cheap walk (an ASCII string costs an ``isascii()``, a
length and a suffix check) and sends the document to the Python emitter; none of the
rendered trees above needed it, two test inputs did. tests/gitops/test_render_yamlio.py pins
the identity (a rendered repository, the awkward strings, a property test), so a libyaml
that writes differently fails the tests instead of changing bytes in Git. Without libyaml
(a PyYAML built without it) everything goes through Python.
"""

from __future__ import annotations

import re
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


def _represent_str(dumper: yaml.representer.SafeRepresenter, data: str) -> yaml.ScalarNode:
    # A literal block keeps embedded YAML (a ConfigMap value) readable in a diff. The emitter
    # falls back to a quoted style by itself when a block cannot represent the text exactly.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)

_FastDumper: type[Any] = _Dumper
if yaml.__with_libyaml__:

    class _CDumper(yaml.CSafeDumper):
        """``_Dumper`` on libyaml's emitter: the same representer, aliases and settings."""

        def ignore_aliases(self, data: Any) -> bool:
            return True

    _CDumper.add_representer(str, _represent_str)
    _FastDumper = _CDumper

# Characters libyaml writes differently from PyYAML (see the module docstring): outside the
# Basic Multilingual Plane, the Unicode line breaks NEL/LS/PS, and lone surrogates.
_PYTHON_ONLY_CHARS = re.compile("[\x85\u2028\u2029\ud800-\udfff\U00010000-\U0010ffff]")


# Text longer than this could make a line longer than ``_WIDTH`` (escapes take up to six
# characters each), where the two emitters fold a double-quoted scalar at different spaces.
_LONG = 4096


def _python_only_text(text: str) -> bool:
    # A literal block kept with "|+" (text ending in an empty line) leaves libyaml's document
    # open: it ends it with "..." where PyYAML does not.
    if len(text) > _LONG or text[-2:] == "\n\n" or text == "\n":
        return True
    return not text.isascii() and _PYTHON_ONLY_CHARS.search(text) is not None


def _python_only_key(key: str) -> bool:
    if not key or "\n" in key or "\r" in key:
        return True
    # Over 128 a key is written as "? key": PyYAML counts characters, libyaml bytes.
    if not key.isascii() and len(key.encode("utf-8", "surrogatepass")) > 128:
        return True
    return _python_only_text(key)


def _python_only(value: Any) -> bool:
    """Whether libyaml would write ``value`` (a mapping or list) differently from PyYAML."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                if _python_only_key(key):
                    return True
            elif _python_only(key):
                return True
            if _python_only(item):
                return True
        return False
    if isinstance(value, list):
        return any(_python_only(item) for item in value)
    if isinstance(value, str):
        return _python_only_text(value)
    return False


def _dump(value: Any) -> str:
    """One document, as PyYAML's pure-Python emitter writes it."""
    container = isinstance(value, dict | list)
    dumper = _FastDumper if container and not _python_only(value) else _Dumper
    text: str = yaml.dump(
        value,
        Dumper=dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_WIDTH,
    )
    return text


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
    return _dump(canonical(value))


def dump_documents(objs: Iterable[Mapping[str, Any]]) -> bytes:
    """Objects as a multi-document YAML file, ``---`` between documents, UTF-8."""
    docs = [_dump(canonical_object(obj)) for obj in objs]
    return "---\n".join(docs).encode("utf-8")


def load_documents(data: bytes) -> list[Any]:
    """The documents of a file written by ``dump_documents`` (empty documents dropped)."""
    return [doc for doc in yaml.safe_load_all(data.decode("utf-8")) if doc is not None]
