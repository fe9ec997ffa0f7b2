"""Reading the CRDs the cluster serves, for the schema check (``gitops.schemas`` keeps them).

The sync lists them at most every ``FLEET_CRD_REFRESH_SECONDS``: they change with an operator
upgrade, not by the minute, and a real cluster's list runs to megabytes. The list is read in
full each time: its own resourceVersion is the store's revision, which moves with any write
anywhere in the cluster, so it cannot tell that the CRDs did not change; each CRD's own
resourceVersion can, and only CRDs whose version moved are rewritten.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from fleet.kube import Kube
from fleet.models import SyncState
from gitops import schemas as gitops_schemas
from gitops.schemas import CrdSync


def crds_due() -> bool:
    """Whether this sync should read the CRDs (never read, the last read failed, or old)."""
    state = SyncState.objects.filter(source=SyncState.Source.CRDS).first()
    if state is None or state.last_success is None or state.error:
        return True
    age = timezone.now() - state.last_success
    return age >= timedelta(seconds=settings.FLEET_CRD_REFRESH_SECONDS)


def sync_crds(kube: Kube) -> CrdSync:
    """Read the served CRDs into the portal; ``KubeError`` when they cannot be read."""
    return gitops_schemas.store_served_crds(kube.list_crds())
