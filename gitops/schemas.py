"""The schemas the checks validate against: the cluster's CRDs as cached, or the directory.

The fleet sync (``fleet.schemas``, on the inventory schedule) hands the CustomResourceDefinitions
the API server serves to ``store_served_crds``, which keeps one ``ServedCrd`` row per CRD, in
the database so every replica validates against the same set. A CRD whose
``metadata.resourceVersion`` did not move is not rewritten; every row's ``fetched_at`` is the
last read that saw it.

``schema_source()`` turns the setting ``GITOPS_SCHEMA_SOURCE`` into the plain-data
``SchemaSource`` that ``gitops.checks.run_checks`` receives. Built-in kinds are always validated
(``kubernetes-validate``, at the fleet's Kubernetes version); custom resources:

- ``cluster``: the cached CRDs (with the charts' values schemas from
  ``GITOPS_SCHEMA_DIR``: no cluster serves a chart's values schema);
- ``directory``: everything from ``GITOPS_SCHEMA_DIR`` (by default ``var/schemas``, what
  ``manage.py fetch_schemas`` downloads: the offline option);
- ``auto``: the cluster's CRDs when read within ``GITOPS_SCHEMA_MAX_AGE_SECONDS``, else the
  directory, and the result says why.

Where the chosen source has no CRDs (nothing read from the cluster yet, an empty directory),
the source is ``builtin`` with the reason, and a change holding custom resources gets a
``partial`` schema check.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from gitops.checks.schema_source import SchemaSource
from gitops.models import ServedCrd

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CrdSync:
    """One read of the served CRDs: how many are kept, changed, removed and malformed."""

    kept: int
    changed: int
    removed: int
    skipped: int


def store_served_crds(items: Iterable[Any]) -> CrdSync:
    """Make ``ServedCrd`` the CRDs in ``items`` (the items of the API server's list)."""
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
    fetched_at = ServedCrd.objects.aggregate(at=Max("fetched_at"))["at"]
    return SchemaSource(
        "cluster",
        directory=directory_with_crds(),
        cluster=settings.GITOPS_FLEET_NAME,
        fetched_at=fetched_at.astimezone(UTC) if fetched_at is not None else None,
        # Names the set: a registry is built once per set, in each process.
        fingerprint=hashlib.sha256(repr(pairs).encode()).hexdigest()[:16],
        load_crds=_load_crds,
    )


def directory_with_crds() -> str | None:
    """``GITOPS_SCHEMA_DIR`` when it exists and holds a CRD file, else None."""
    directory = settings.GITOPS_SCHEMA_DIR
    if not directory:
        return None
    root = Path(directory)
    if not root.is_dir() or not any(
        p.suffix in (".yaml", ".yml") or p.name == "values.schema.json" for p in root.rglob("*")
    ):
        return None
    return str(root)


def _no_directory_reason() -> str:
    directory = settings.GITOPS_SCHEMA_DIR
    if not directory:
        return "no GITOPS_SCHEMA_DIR is set"
    return (
        f"GITOPS_SCHEMA_DIR ({Path(directory).name}) holds no CRDs yet: run "
        "manage.py fetch_schemas, or point it at a folder of CRD files"
    )


def schema_source() -> SchemaSource:
    """The schema source ``GITOPS_SCHEMA_SOURCE`` selects now. Built-in kinds are validated
    whatever it is; with no CRDs anywhere the source is ``builtin``, and says why."""
    mode = settings.GITOPS_SCHEMA_SOURCE
    directory = directory_with_crds()
    if mode == "directory":
        if directory is None:
            return SchemaSource.builtin(note=_no_directory_reason())
        return SchemaSource.from_directory(directory)
    cluster = cluster_source()
    if mode == "cluster":
        if cluster is None:
            return SchemaSource.builtin(
                note="no CRDs have been read from the cluster yet (see the fleet sync)"
            )
        return cluster
    if cluster is not None and cluster.fetched_at is not None:
        age = timezone.now() - cluster.fetched_at
        if age <= timedelta(seconds=settings.GITOPS_SCHEMA_MAX_AGE_SECONDS):
            return cluster
        reason = f"the cluster's CRDs were last read {int(age.total_seconds() // 60)} min ago"
    else:
        reason = "no CRDs read from the cluster yet"
    if directory is None:
        if cluster is not None:
            return cluster
        return SchemaSource.builtin(note=f"auto: {reason}; {_no_directory_reason()}")
    return SchemaSource.from_directory(directory, note=f"auto: {reason}")
