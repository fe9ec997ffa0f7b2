"""The CustomResourceDefinitions the simulated API server has installed.

A real cluster serves every installed CRD at
``/apis/apiextensions.k8s.io/v1/customresourcedefinitions[/<plural>.<group>]``; the portal reads
them to build its schema registry. The simulator installs the CRDs found in its configured
directory (``SimConfig.crd_dir``, every ``*.yaml``/``*.yml`` below it) and stores them like any
other object, so lists carry ``metadata.resourceVersion`` and a patch moves it.

The status is what the apiextensions controllers write once a CRD is accepted
(k8s.io/apiextensions-apiserver ``pkg/apis/apiextensions/v1`` ``CustomResourceDefinitionStatus``:
``acceptedNames``, the ``NamesAccepted`` and ``Established`` conditions, ``storedVersions``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from simulator.config import ConfigError
from simulator.store import CRDS, JsonObject, Store, as_dict, as_list, timestamp

# libyaml when present: the upstream CRDs run to megabytes.
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class JsonLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """Safe YAML without the timestamp type: the API server decodes YAML through JSON, where
    an unquoted date stays a string (and a datetime could not be served as JSON)."""


JsonLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_crds(directory: str | Path) -> list[JsonObject]:
    """Every CustomResourceDefinition in the YAML files under ``directory``.

    Parsed once per process while the files stay the same: the upstream CRDs take seconds
    to parse, and tests start many simulators on one directory. Callers must not mutate them.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"crd_dir: {root} is not a directory")
    files = tuple(
        (path, path.stat().st_mtime_ns, path.stat().st_size)
        for path in sorted(root.rglob("*"))
        if path.suffix in (".yaml", ".yml") and path.is_file()
    )
    return _parse(files)


@functools.lru_cache(maxsize=4)
def _parse(files: tuple[tuple[Path, int, int], ...]) -> list[JsonObject]:
    crds: list[JsonObject] = []
    for path, _mtime, _size in files:
        try:
            docs = list(yaml.load_all(path.read_text(encoding="utf-8"), Loader=JsonLoader))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(f"crd_dir: cannot read {path.name}: {exc}") from exc
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(doc)
    return crds


def install_crds(store: Store, crds: list[JsonObject], now: float) -> int:
    """Store each CRD as the API server would serve it, accepted and established."""
    for crd in crds:
        spec = as_dict(crd.get("spec"))
        names = as_dict(spec.get("names"))
        group = spec.get("group")
        if not isinstance(group, str) or not names.get("plural"):
            raise ConfigError(f"crd_dir: a CustomResourceDefinition without group or names: {crd}")
        metadata = {
            key: value
            for key, value in as_dict(crd.get("metadata")).items()
            if key in ("name", "labels", "annotations")
        }
        # The API server requires the name <plural>.<group>.
        metadata["name"] = f"{names['plural']}.{group}"
        versions = as_list(spec.get("versions"))
        stored = [v.get("name") for v in versions if isinstance(v, dict) and v.get("storage")]
        when = timestamp(now)
        status: dict[str, Any] = {
            "acceptedNames": names,
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "lastTransitionTime": when,
                }
                for kind, reason, message in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ],
            "storedVersions": stored,
        }
        store.apply(
            CRDS,
            {
                "apiVersion": CRDS.api_version,
                "kind": CRDS.kind,
                "metadata": metadata,
                "spec": spec,
                "status": status,
            },
            now,
        )
    return len(crds)
