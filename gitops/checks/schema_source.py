"""Where one check run's schemas come from, and how its results name them.

A ``SchemaSource`` is plain data (this package imports no Django): the portal builds it
(``fleet.schemas.schema_source``) and ``run_checks`` receives it.

- ``cluster``: custom resources are validated against the CRDs the cluster serves, as last
  read into the portal's database (``load_crds`` returns them; ``fingerprint`` names that set,
  so a registry is built once per set and kept). A chart's values schema is not served by any
  cluster, so the vCluster chart's still comes from ``directory`` when one is configured.
- ``directory``: CRDs and chart values schemas from ``directory`` (the offline option).

Built-in kinds (Namespace, RBAC, quota, ...) are validated against schemas derived from the
official ``kubernetes`` client's models in both cases (``gitops.checks.schema``): the fleet
simulator does not serve ``/openapi/v3``, and the client's models are generated from that
document for one Kubernetes minor version, which the label names.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import kubernetes

from gitops.checks.schema import CORE_KINDS, SchemaRegistry, get_registry, helm_values_schemas
from gitops.render.vcluster import CHART_VERSION

Origin = Literal["cluster", "directory"]

# Registries built from cluster CRDs, newest last. Two are enough: the set in use and the one
# a refresh just replaced (a check run that started before the refresh may still need it).
_CLUSTER_REGISTRIES: OrderedDict[tuple[str, str], SchemaRegistry] = OrderedDict()
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
    # Why this source was chosen over the configured one (``auto`` falling back), for the label.
    note: str = ""
    # Why the configured source has no schemas to give (the schema check is then skipped).
    unavailable: str = ""

    @classmethod
    def from_directory(cls, directory: str | Path, *, note: str = "") -> SchemaSource:
        return cls("directory", directory=str(directory), note=note)

    def registry(self) -> SchemaRegistry:
        """The registry of this source; ``OSError``/``ValueError`` when it cannot be loaded."""
        if self.origin == "directory":
            if self.directory is None:
                raise ValueError("a directory schema source needs a directory")
            return get_registry(self.directory)
        key = (self.fingerprint, self.directory or "")
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
        )
        with _cluster_lock:
            _CLUSTER_REGISTRIES[key] = registry
            while len(_CLUSTER_REGISTRIES) > _CLUSTER_KEEP:
                _CLUSTER_REGISTRIES.popitem(last=False)
        return registry

    def short_label(self) -> str:
        """``cluster ai-factory CRDs as of 12:03 UTC`` or ``directory crds``."""
        if self.origin == "cluster":
            when = f" as of {self.fetched_at:%Y-%m-%d %H:%M} UTC" if self.fetched_at else ""
            return f"cluster {self.cluster} CRDs{when}"
        return f"directory {Path(self.directory or '').name}"

    def label(self, registry: SchemaRegistry, used: Iterable[tuple[str, str]] = ()) -> str:
        """Which source and versions validated the kinds ``used`` ((apiVersion, kind) pairs)."""
        custom = sorted({key for key in used if key not in CORE_KINDS and registry.knows(*key)})
        named = ", ".join(f"{api_version} {kind}" for api_version, kind in custom[:LABEL_KINDS])
        if len(custom) > LABEL_KINDS:
            named += f", {len(custom) - LABEL_KINDS} more"
        parts = [f"{self.short_label()}" + (f" ({named})" if named else "")]
        parts.append(f"built-in kinds from the kubernetes client {kubernetes.__version__} models")
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
