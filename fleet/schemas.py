"""The schemas the checks validate against, read from the cluster the portal manages.

The sync (``fleet.services.sync_all``, on the inventory schedule) lists the
CustomResourceDefinitions the API server serves at most every ``FLEET_CRD_REFRESH_SECONDS``
and keeps one ``ServedCrd`` row per CRD, in the database so every replica validates against
the same set. A CRD whose ``metadata.resourceVersion`` did not move is not rewritten; the
list itself is read in full each time, because the list's own resourceVersion is the store's
revision and moves with any write anywhere, so it cannot say "the CRDs did not change".

``schema_source()`` turns the setting ``GITOPS_SCHEMA_SOURCE`` into the plain-data
``SchemaSource`` that ``gitops.checks.run_checks`` receives:

- ``cluster``: the cached CRDs (with the vCluster chart's values schema from
  ``GITOPS_SCHEMA_DIR``: no cluster serves a chart's values schema); none cached yet: the
  schema check is skipped with that reason;
- ``directory``: everything from ``GITOPS_SCHEMA_DIR`` (the offline option);
- ``auto``: the cluster's CRDs when read within ``GITOPS_SCHEMA_MAX_AGE_SECONDS``, else the
  directory, and the result says why.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from fleet.kube import Kube
from fleet.models import ServedCrd, SyncState
from gitops.checks.schema_source import SchemaSource

logger = logging.getLogger(__name__)

SOURCES = ("cluster", "directory", "auto")


@dataclass(frozen=True)
class CrdSync:
    """One read of the served CRDs: how many are kept, changed, removed and malformed."""

    kept: int
    changed: int
    removed: int
    skipped: int


def crds_due() -> bool:
    """Whether the next sync should read the CRDs again (never read, or the last read old)."""
    state = SyncState.objects.filter(source=SyncState.Source.CRDS).first()
    if state is None or state.last_success is None or state.error:
        return True
    age = timezone.now() - state.last_success
    return age >= timedelta(seconds=settings.FLEET_CRD_REFRESH_SECONDS)


def sync_crds(kube: Kube) -> CrdSync:
    """Read the served CRDs into ``ServedCrd``; ``KubeError`` when they cannot be read."""
    items, _list_version = kube.list_crds()
    now = timezone.now()
    rows: dict[str, dict[str, Any]] = {}
    skipped = 0
    for item in items:
        row = _row(item)
        if row is None:
            skipped += 1
            continue
        rows[row["name"]] = row
    with transaction.atomic():
        known = dict(ServedCrd.objects.values_list("name", "resource_version"))
        changed = [row for name, row in rows.items() if known.get(name) != row["resource_version"]]
        for row in changed:
            ServedCrd.objects.update_or_create(
                name=row["name"], defaults={**row, "fetched_at": now}
            )
        # Every row carries the time it was last confirmed, changed or not.
        ServedCrd.objects.filter(name__in=rows).update(fetched_at=now)
        removed, _ = ServedCrd.objects.exclude(name__in=rows).delete()
    return CrdSync(kept=len(rows), changed=len(changed), removed=removed, skipped=skipped)


def _row(crd: Any) -> dict[str, Any] | None:
    """The ``ServedCrd`` fields of one listed CRD, or None for one that cannot be used."""
    if not isinstance(crd, Mapping):
        return None
    metadata = crd.get("metadata")
    spec = crd.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return None
    names = spec.get("names")
    versions = spec.get("versions")
    name = metadata.get("name")
    if (
        not isinstance(name, str)
        or not isinstance(spec.get("group"), str)
        or not isinstance(names, Mapping)
        or not isinstance(names.get("kind"), str)
        or not isinstance(versions, list)
        or not all(isinstance(v, Mapping) and isinstance(v.get("name"), str) for v in versions)
    ):
        logger.warning("skipping a malformed CustomResourceDefinition %r", name)
        return None
    return {
        "name": name,
        "group": spec["group"],
        "kind": names["kind"],
        "versions": [
            {"name": v["name"], "served": bool(v.get("served")), "storage": bool(v.get("storage"))}
            for v in versions
        ],
        "spec": dict(spec),
        "resource_version": str(metadata.get("resourceVersion") or ""),
    }


def _load_crds() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": spec,
        }
        for name, spec in ServedCrd.objects.values_list("name", "spec")
    ]


def cluster_source() -> SchemaSource | None:
    """The cached CRDs as a schema source, or None when none were read yet."""
    pairs = list(ServedCrd.objects.order_by("name").values_list("name", "resource_version"))
    if not pairs:
        return None
    state = SyncState.objects.filter(source=SyncState.Source.CRDS).first()
    fetched_at = state.last_success if state is not None else None
    digest = hashlib.sha256(repr(pairs).encode()).hexdigest()[:16]
    return SchemaSource(
        "cluster",
        directory=settings.GITOPS_SCHEMA_DIR or None,
        cluster=settings.GITOPS_FLEET_NAME,
        fetched_at=fetched_at.astimezone(UTC) if fetched_at is not None else None,
        fingerprint=digest,
        load_crds=_load_crds,
    )


def schema_source() -> SchemaSource | None:
    """The schema source ``GITOPS_SCHEMA_SOURCE`` selects now (None: nothing configured)."""
    mode = settings.GITOPS_SCHEMA_SOURCE
    directory = settings.GITOPS_SCHEMA_DIR or None
    if mode == "directory":
        return SchemaSource.from_directory(directory) if directory else None
    cluster = cluster_source()
    if mode == "cluster":
        if cluster is None:
            return SchemaSource(
                "cluster",
                directory=directory,
                cluster=settings.GITOPS_FLEET_NAME,
                unavailable="no CRDs have been read from the cluster yet (see the fleet sync)",
            )
        return cluster
    # auto
    if cluster is not None and cluster.fetched_at is not None:
        age = timezone.now() - cluster.fetched_at
        if age <= timedelta(seconds=settings.GITOPS_SCHEMA_MAX_AGE_SECONDS):
            return cluster
        reason = f"the cluster's CRDs were last read {int(age.total_seconds() // 60)} min ago"
    else:
        reason = "no CRDs read from the cluster yet"
    if directory is None:
        return cluster
    return SchemaSource.from_directory(directory, note=f"auto: {reason}")
