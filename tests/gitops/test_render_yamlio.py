"""The YAML dumper: stable bytes, canonical key order, no aliases, user strings stay strings."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitops.fleet import demo_fleet
from gitops.render import render_repository, render_tenant_tree, yamlio
from gitops.render.yamlio import (
    canonical,
    canonical_object,
    dump_documents,
    dump_value,
    load_documents,
)
from tests.gitops.render_samples import dedicated_tenant, rich_tenant

NASTY = [
    "yes",
    "no",
    "on",
    "off",
    "y",
    "n",
    "true",
    "False",
    "null",
    "Null",
    "~",
    "",
    " ",
    "0x1",
    "0o17",
    "017",
    "1e3",
    "1_000",
    "3.14",
    ".inf",
    "-.inf",
    ".nan",
    "12:30:45",
    "2026-12-31",
    "*a",
    "&b",
    "!tag",
    "!!python/object:os.system",
    "- x",
    "key: v",
    "? q",
    "# comment",
    "a #b",
    "[1, 2]",
    "{a: 1}",
    "|",
    ">",
    "%YAML 1.2",
    "---",
    "...",
    "@handle",
    "`cmd`",
    "'single'",
    '"double"',
    "tab\there",
    "line\nbreak",
    "trailing space ",
    "multi\nline\n",
    "unicode: Grüße 🚀",
    "\\backslash",
    "{{ request.object.spec }}",
]


def test_it_round_trips_strings_that_look_like_yaml() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "nasty", "annotations": {f"k{i}": s for i, s in enumerate(NASTY)}},
        "data": {s or "empty": s for s in NASTY},
        "list": NASTY,
    }
    dumped = dump_documents([obj])
    assert load_documents(dumped) == [obj]
    assert yaml.safe_load(dump_value(NASTY)) == NASTY


def test_it_puts_kubernetes_keys_first_and_sorts_the_rest() -> None:
    obj = {
        "zeta": 1,
        "spec": {"b": 1, "a": 2},
        "metadata": {"labels": {"z": "1", "a": "2"}, "namespace": "ns", "name": "n"},
        "kind": "Thing",
        "apiVersion": "example.com/v1",
        "alpha": 2,
    }
    text = dump_documents([obj]).decode()
    assert text == (
        "apiVersion: example.com/v1\n"
        "kind: Thing\n"
        "metadata:\n"
        "  name: n\n"
        "  namespace: ns\n"
        "  labels:\n"
        "    a: '2'\n"
        "    z: '1'\n"
        "spec:\n"
        "  a: 2\n"
        "  b: 1\n"
        "alpha: 2\n"
        "zeta: 1\n"
    )


def test_it_never_writes_anchors_or_aliases() -> None:
    shared = {"matchLabels": {"app": "x"}}
    objs = [{"apiVersion": "v1", "kind": "A", "spec": {"one": shared, "two": shared}}] * 2
    text = dump_documents(objs).decode()
    assert "&" not in text and "*" not in text
    assert text.count("---\n") == 1
    assert load_documents(text.encode()) == objs


def test_it_does_not_fold_long_lines() -> None:
    long = "x " * 500
    assert dump_value({"k": long}).count("\n") == 1


def test_it_writes_multi_line_text_as_a_literal_block() -> None:
    assert dump_value({"k": "a: 1\nb: 2\n"}) == "k: |\n  a: 1\n  b: 2\n"


def test_it_renders_identical_bytes_for_equal_specs() -> None:
    first = render_tenant_tree(rich_tenant(), demo_fleet())
    second = render_tenant_tree(rich_tenant(), demo_fleet())
    assert first == second
    assert list(first) == sorted(first)


def test_it_renders_the_same_whatever_order_shares_endpoints_and_clusters_come_in() -> None:
    tenant = rich_tenant()
    shuffled = dataclasses.replace(
        tenant,
        shares=tuple(reversed(tenant.shares)),
        endpoints=tuple(reversed(tenant.endpoints)),
        clusters=tuple(reversed(tenant.clusters)),
    )
    assert render_tenant_tree(shuffled, demo_fleet()) == render_tenant_tree(tenant, demo_fleet())


@pytest.mark.parametrize("value", ["yes", "null", "0x1", "*a", "&b", "- x", "key: v"])
def test_it_keeps_a_nasty_display_name_a_string(value: str) -> None:
    tenant = dataclasses.replace(rich_tenant(), display_name=value)
    files = render_tenant_tree(tenant, demo_fleet())
    (namespace,) = load_documents(files["tenants/alpha/namespace.yaml"])
    assert namespace["metadata"]["annotations"]["ai-factory.io/display-name"] == value


_DIGEST_SCRIPT = """
import hashlib
from gitops.fleet import demo_fleet
from gitops.render import render_repository
from tests.gitops.render_samples import dedicated_tenant, rich_tenant
files = render_repository(demo_fleet(), [rich_tenant(), dedicated_tenant()])
digest = hashlib.sha256()
for path, data in files.items():
    digest.update(path.encode() + b"\\0" + data + b"\\0")
print(digest.hexdigest())
"""


def test_it_renders_the_same_bytes_in_every_process() -> None:
    # Set and dict iteration order can change with the hash seed; the output must not.
    root = Path(__file__).resolve().parents[2]
    digests = {
        subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT],
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1


# --- libyaml writes what PyYAML writes (gitops/render/yamlio.py) -------------------------------

_PYTHON_DUMP = {
    "sort_keys": False,
    "default_flow_style": False,
    "allow_unicode": True,
    "width": yamlio._WIDTH,
}


def _python_bytes(value: object) -> str:
    # The reference: PyYAML's pure-Python emitter, whatever yamlio picks.
    text: str = yaml.dump(value, Dumper=yamlio._Dumper, **_PYTHON_DUMP)
    return text


def _documents(files: dict[str, bytes]) -> list[object]:
    return [doc for data in files.values() for doc in yaml.safe_load_all(data) if doc is not None]


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml: Python only")
def test_it_writes_the_python_emitters_bytes_for_a_whole_repository() -> None:
    fleet = demo_fleet()
    files = render_repository(fleet, [rich_tenant(), dedicated_tenant()])
    documents = _documents(files)
    assert len(documents) > 50
    fast = 0
    for doc in documents:
        value = canonical_object(doc) if isinstance(doc, dict) else canonical(doc)
        assert yamlio._dump(value) == _python_bytes(value)
        fast += not yamlio._python_only(value)
    assert fast == len(documents)  # the rendered fleet never needs the slow path


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml: Python only")
@pytest.mark.parametrize(
    "value",
    [
        *NASTY,
        "x" * 70_000,
        ("y " * 40_000) + "\x7f",
        "a😀b\nc\n",
        "x\x85y",
        "a\u2028b",
        "lone \ud800",
        "kept\n\n",
        "\n",
        "  lead\ntrail \n\ttab\n",
        "é" * 100,
    ],
)
def test_it_writes_the_python_emitters_bytes_for_awkward_text(value: str) -> None:
    for tree in ({"k": value}, [value], {value: 1}, {"a": [{"b": value, value: [value]}]}):
        assert yamlio._dump(tree) == _python_bytes(tree)
    assert dump_value(value) == _python_bytes(value)


_AWKWARD = [
    *NASTY,
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    "\x0b",
    "\x85",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\x00",
    "😀",
    "\ud800",
    " ",
    "é" * 70,
    "x" * 130,
    "x" * 5000,
]
_text = st.one_of(
    st.text(max_size=20),
    st.lists(st.sampled_from(_AWKWARD), max_size=5).map("".join),
)
_scalars = st.one_of(_text, st.integers(), st.booleans(), st.none(), st.floats())
_trees = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=12,
)


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml: Python only")
@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(_trees)
def test_it_writes_the_python_emitters_bytes_for_any_tree(value: object) -> None:
    assert yamlio._dump(value) == _python_bytes(value)
