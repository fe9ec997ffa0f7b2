"""Reading what a tenant's ClusterQueue on a branch or main promises."""

from __future__ import annotations

import yaml


def nominal_gpus(queues: bytes | None, flavor: str, resource: str = "nvidia.com/gpu") -> int:
    """The nominal quota of ``resource`` on ``flavor`` in a tenant's ``queues.yaml`` (0 when
    the ClusterQueue has none)."""
    for document in yaml.safe_load_all(queues or b""):
        if not document or document.get("kind") != "ClusterQueue":
            continue
        for group in document["spec"].get("resourceGroups", []):
            for entry in group["flavors"]:
                if entry["name"] != flavor:
                    continue
                for item in entry["resources"]:
                    if item["name"] == resource:
                        return int(item["nominalQuota"])
    return 0
