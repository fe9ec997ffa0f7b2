"""The checks' fast YAML loader builds what PyYAML's constructor builds, or raises what it
raises: on every YAML file of ../shared (CRDs, upstream fixtures), on a rendered fleet, and on
documents made to take every way out of the fast path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gitops.checks.manifests import FastKubeYamlLoader, KubeYamlLoader, load_documents
from gitops.fleet import demo_fleet
from tests.gitops.checks_support import missing
from tests.gitops.render_samples import dedicated_tenant, rendered_fleet, rich_tenant

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def require_shared(what: str) -> None:
    if not SHARED.is_dir():
        missing(f"{what} are not beside the checkout (no ../shared)")


def _both(data: bytes | str) -> tuple[Any, Any]:
    def load(loader: type) -> Any:
        try:
            return ("ok", list(yaml.load_all(data, Loader=loader)))
        except yaml.YAMLError as exc:
            return ("error", str(exc))

    return load(KubeYamlLoader), load(FastKubeYamlLoader)


def test_every_yaml_file_of_shared_loads_the_same() -> None:
    require_shared("the upstream YAML files of ../shared")
    files = sorted(p for p in SHARED.rglob("*") if p.suffix in (".yaml", ".yml"))
    assert len(files) > 20, "../shared holds no YAML files"
    for path in files:
        reference, fast = _both(path.read_bytes())
        assert fast == reference, path


def test_a_rendered_fleet_loads_the_same() -> None:
    files = rendered_fleet(demo_fleet(), rich_tenant(), dedicated_tenant())
    assert len(files) > 40
    for path, data in files.items():
        if path.endswith((".yaml", ".yml")):
            reference, fast = _both(data)
            assert fast == reference, path
            assert reference[0] == "ok"


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\nb: 1.5\nc: true\nd: null\ne: ~\nf: '1'\ng: 0x1f\nh: 2026-01-01\ni: .inf\n",
        "base: &b {x: 1, y: [1, 2]}\nother:\n  <<: *b\n  z: 3\n",  # a merge key
        "a: &x [1, 2]\nb: *x\n",  # an alias, built twice
        "a: &x {k: 1}\nb: *x\n",
        "&r [1, *r]\n",  # recursive
        "? [1, 2]\n: x\n",  # an unhashable key
        "? {a: 1}\n: x\n",
        "a: !!str 12\nb: !!int '12'\nc: !!float '1'\nd: !!binary aGVsbG8=\n",
        "a: !custom 1\n",  # an unknown tag: PyYAML's error
        "a: !!set {x, y}\n",
        "a: !!omap [x: 1]\n",
        "= : 1\n",  # the value key
        "a: 1\na: 2\n",  # a duplicate key: the last wins, as in PyYAML
        "- 1\n- [2, [3, {4: five}]]\n--- \n---\nx: y\n",
        "a: [1, 2\n",  # a syntax error
        "a: b: c\n",
        "",
        "yes: no\non: off\ny: n\n",
        "a: '\\u00e9'\nb: \"\\u00e9\"\nc: é\n",
        "a: 1_000\nb: 0o17\nc: 017\nd: +12\ne: -.5\nf: 1e3\ng: .NaN\n",
        "a: |\n  line\n  more\nb: >\n  folded\n  text\n",
    ],
)
def test_every_way_out_of_the_fast_path(text: str) -> None:
    reference, fast = _both(text)
    # Compared as printed: in order, and NaN (not equal to itself) and a list holding itself
    # compare too.
    assert repr(fast) == repr(reference)


def test_load_documents_uses_it() -> None:
    assert load_documents(b"a: &x [1]\nb: *x\n") == [{"a": [1], "b": [1]}]
