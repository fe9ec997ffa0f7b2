"""Where one check run's schemas come from, and how its results name them.

A ``SchemaSource`` is plain data (this package imports no Django): the portal builds it
(``gitops.schemas.schema_source``) and ``run_checks`` receives it.

Built-in kinds (Namespace, RBAC, quota, DRA, ...) are always validated, offline, against the
upstream OpenAPI schemas of the fleet's Kubernetes version that the pinned
``kubernetes-validate`` package ships (``gitops.checks.schema.core_schemas``). Custom
resources come from one of:

- ``cluster``: the CRDs the cluster serves, as last read into the portal's database
  (``load_crds`` returns them; ``fingerprint`` names that set, so a registry is built once per
  set and kept). A chart's values schema is not served by any cluster, so the vCluster
  chart's still comes from ``directory`` when one is configured;
- ``directory``: CRDs and chart values schemas from ``directory`` (what ``manage.py
  fetch_schemas`` downloads, or any folder of CRD files: the offline option);
- ``builtin``: none at all. Custom resources are then not validated, and the schema check
  says so as ``partial`` (never ``passed``), naming the kinds it could not validate.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from gitops.checks.schema import (
    DEFAULT_KUBERNETES_VERSION,
    SchemaRegistry,
    get_registry,
    helm_values_schemas,
)
from gitops.render.vcluster import CHART_VERSION

Origin = Literal["cluster", "directory", "builtin"]

# Registries built from cluster CRDs, newest last. Two are enough: the set in use and the one
# a refresh just replaced (a check run that started before the refresh may still need it).
_CLUSTER_REGISTRIES: OrderedDict[tuple[str, str, str], SchemaRegistry] = OrderedDict()
_CLUSTER_KEEP = 2
_cluster_lock = threading.Lock()
# At most this many custom kinds are named in a label; the rest are counted.
LABEL_KINDS = 8


@dataclass(frozen=True)
class SchemaSource:
    """The schemas of one check run (see the module docstring)."""

    origin: Origin
    directory: str | None = None
    cluster: str = ""
    fetched_at: datetime | None = None
    fingerprint: str = ""
    load_crds: Callable[[], Iterable[Mapping[str, Any]]] | None = field(
        default=None, compare=False, repr=False
    )
    # Why this source was chosen over the configured one (a fallback), for the label.
    note: str = ""

    @classmethod
    def from_directory(cls, directory: str | Path, *, note: str = "") -> SchemaSource:
        return cls("directory", directory=str(directory), note=note)

    @classmethod
    def builtin(cls, *, note: str = "") -> SchemaSource:
        """Built-in kinds only: no CRDs anywhere (custom resources are not validated)."""
        return cls("builtin", note=note)

    def registry(self, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> SchemaRegistry:
        """The registry of this source with the built-in kinds of ``kubernetes_version``;
        ``OSError``/``ValueError`` when it cannot be loaded."""
        if self.origin == "builtin":
            return get_registry(None, kubernetes_version)
        if self.origin == "directory":
            if self.directory is None:
                raise ValueError("a directory schema source needs a directory")
            return get_registry(self.directory, kubernetes_version)
        key = (self.fingerprint, self.directory or "", kubernetes_version)
        with _cluster_lock:
            registry = _CLUSTER_REGISTRIES.get(key)
            if registry is not None:
                _CLUSTER_REGISTRIES.move_to_end(key)
                return registry
        if self.load_crds is None:
            raise ValueError("a cluster schema source needs its CRDs")
        registry = SchemaRegistry.from_crds(
            self.load_crds(),
            helm_values_schemas=helm_values_schemas(self.directory) if self.directory else None,
            kubernetes_version=kubernetes_version,
        )
        with _cluster_lock:
            _CLUSTER_REGISTRIES[key] = registry
            while len(_CLUSTER_REGISTRIES) > _CLUSTER_KEEP:
                _CLUSTER_REGISTRIES.popitem(last=False)
        return registry

    def short_label(self) -> str:
        """``cluster ai-factory CRDs as of 12:03 UTC``, ``directory schemas`` or ``built-in
        kinds only``."""
        if self.origin == "cluster":
            when = f" as of {self.fetched_at:%Y-%m-%d %H:%M} UTC" if self.fetched_at else ""
            return f"cluster {self.cluster} CRDs{when}"
        if self.origin == "builtin":
            return "built-in kinds only, no CRDs"
        return f"directory {Path(self.directory or '').name}"

    def label(self, registry: SchemaRegistry, used: Iterable[tuple[str, str]] = ()) -> str:
        """Which source and versions validated the kinds ``used`` ((apiVersion, kind) pairs)."""
        custom = sorted(
            {key for key in used if not registry.is_builtin(*key) and registry.knows(*key)}
        )
        named = ", ".join(f"{api_version} {kind}" for api_version, kind in custom[:LABEL_KINDS])
        if len(custom) > LABEL_KINDS:
            named += f", {len(custom) - LABEL_KINDS} more"
        parts = [f"{self.short_label()}" + (f" ({named})" if named else "")]
        parts.append(registry.core.label())
        if "vcluster" in registry.helm_charts():
            parts.append(
                f"vCluster chart {CHART_VERSION} values from directory "
                f"{Path(self.directory or '').name}"
            )
        else:
            parts.append("vCluster chart values not checked (no values schema)")
        label = "schemas: " + "; ".join(parts)
        return f"{label} ({self.note})" if self.note else label


__all__ = ["SchemaSource"]
