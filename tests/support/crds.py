"""A minimal CustomResourceDefinition for tests that need one of their own making."""

from __future__ import annotations

from typing import Any


def crd(
    kind: str,
    group: str = "example.com",
    version: str = "v1",
    schema: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A namespaced CRD serving one version of `kind`; `schema` is its openAPIV3Schema."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema or {"type": "object"}},
                }
            ],
        },
    }
