"""The tenant's Namespace: Pod Security "restricted" and the labels others select it by."""

from __future__ import annotations

from typing import Any

from gitops.render.meta import (
    COST_CENTRE_ANNOTATION,
    DISPLAY_NAME_ANNOTATION,
    FLUX_TENANT_LABEL,
    TRUST_LEVEL_LABEL,
    metadata,
)
from gitops.specs import TenantSpec

POD_SECURITY_LEVEL = "restricted"


def namespace(tenant: TenantSpec) -> dict[str, Any]:
    pod_security = {
        f"pod-security.kubernetes.io/{mode}{suffix}": value
        for mode in ("enforce", "audit", "warn")
        for suffix, value in (("", POD_SECURITY_LEVEL), ("-version", "latest"))
    }
    annotations = {
        key: value
        for key, value in (
            (DISPLAY_NAME_ANNOTATION, tenant.display_name),
            (COST_CENTRE_ANNOTATION, tenant.cost_centre),
        )
        if value
    }
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(
            tenant.slug,
            tenant=tenant.slug,
            extra_labels={
                FLUX_TENANT_LABEL: tenant.slug,
                TRUST_LEVEL_LABEL: tenant.trust_level,
                **pod_security,
            },
            annotations=annotations,
        ),
    }
