"""The simulator's Kyverno ``patchesJson6902`` against Kyverno's own unit tests: each case is
transcribed from kyverno/kyverno v1.19.0 pkg/engine/mutate/patch/patchJSON6902_test.go
(``TestJsonPatch``, ``Test_MissingPaths``), named after the upstream case. Upstream compares
the patched document (``TestJsonPatch``) or the patches between input and output
(``Test_MissingPaths``); here the patched document, which those patches describe."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from simulator.kyverno import json6902

DEPLOYMENT = yaml.safe_load("""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: myDeploy
spec:
  replica: 2
  template:
    metadata:
      labels:
        old-label: old-value
    spec:
      containers:
      - image: nginx
        name: nginx
""")
NGINX: dict[str, Any] = {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2"}]}}
TOLERATION = {"key": "node-role.kubernetes.io/test", "effect": "NoSchedule", "operator": "Exists"}
NOT_READY = {
    "effect": "NoExecute",
    "key": "node.kubernetes.io/not-ready",
    "operator": "Exists",
    "tolerationSeconds": 300,
}


def _spec(document: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = document["spec"]["template"]["spec"]
    return spec


def test_single_patch() -> None:
    out = json6902(DEPLOYMENT, "- op: replace\n  path: /spec/replica\n  value: 5\n")
    assert out["spec"]["replica"] == 5 and _spec(out) == _spec(DEPLOYMENT)


def test_insert_to_list() -> None:
    patch = """
- op: add
  path: /spec/template/spec/containers/1
  value: {"name":"new-nginx","image":"new-nginx-image"}
"""
    assert _spec(json6902(DEPLOYMENT, patch))["containers"] == [
        {"image": "nginx", "name": "nginx"},
        {"name": "new-nginx", "image": "new-nginx-image"},
    ]


def test_replace_first_element_in_list() -> None:
    patch = """
- op: replace
  path: /spec/template/spec/containers/0
  value: {"name":"new-nginx","image":"new-nginx-image"}
"""
    assert _spec(json6902(DEPLOYMENT, patch))["containers"] == [
        {"name": "new-nginx", "image": "new-nginx-image"}
    ]


def test_multiple_operations() -> None:
    patch = """
- op: replace
  path: /spec/template/spec/containers/0/name
  value: my-nginx
- op: add
  path: /spec/replica
  value: 999
- op: add
  path: /spec/template/spec/volumes
  value:
  - emptyDir:
      medium: Memory
    name: vault-secret
"""
    out = json6902(DEPLOYMENT, patch)
    assert out["spec"]["replica"] == 999
    assert _spec(out) == {
        "containers": [{"image": "nginx", "name": "my-nginx"}],
        "volumes": [{"emptyDir": {"medium": "Memory"}, "name": "vault-secret"}],
    }


@pytest.mark.parametrize(
    ("name", "resource", "patch", "tolerations"),
    [
        ("add-to-non-exist-array", NGINX, "/spec/tolerations/0", [TOLERATION]),
        (
            "add-to-exist-array-2",
            {"spec": {**NGINX["spec"], "tolerations": [NOT_READY]}},
            "/spec/tolerations/-",
            [NOT_READY, TOLERATION],
        ),
        # The portal's own use (gitops.render.kyverno): append to a list not there yet.
        ("append to a missing list", NGINX, "/spec/tolerations/-", [TOLERATION]),
    ],
)
def test_missing_paths(
    name: str, resource: dict[str, Any], patch: str, tolerations: list[dict[str, Any]]
) -> None:
    operations = [{"path": patch, "op": "add", "value": TOLERATION}]
    assert json6902(resource, operations)["spec"]["tolerations"] == tolerations, name


def test_add_map_to_non_exist_path() -> None:
    operations = [
        {"path": "/spec/nodeSelector", "op": "add", "value": {"node.kubernetes.io/role": "test"}}
    ]
    out = json6902(NGINX, operations)
    assert out["spec"]["nodeSelector"] == {"node.kubernetes.io/role": "test"}
