"""Readiness check of the cluster API, registered with the portal by PORTAL_READINESS_CHECKS."""

from __future__ import annotations

from django.conf import settings

from fleet.kube import Kube, KubeError
from portal.health import CheckResult, failed, ok


def cluster_api() -> CheckResult:
    """The fleet's API server answers /version within the readiness timeout."""
    try:
        with Kube(timeout=settings.PORTAL_READINESS_TIMEOUT_SECONDS) as kube:
            where = kube.where
            version = kube.version()
    except KubeError as exc:
        return failed(str(exc))
    return ok(f"{where} answered (Kubernetes {version.get('gitVersion', 'version unknown')})")
