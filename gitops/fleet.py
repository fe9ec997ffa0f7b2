"""The fleet the portal renders for: the built-in demo fleet, or one described in a YAML file.

A fleet file has the fields of ``gitops.specs.FleetSpec`` (nested: ``flavors``, ``gateway``);
``node_labels`` and ``mig_profiles`` are mappings. For example::

    name: ai-factory
    cohort: gpu-fleet
    flavors:
      - name: h100
        product: NVIDIA-H100-80GB-HBM3
        mode: whole
        gpus: 64
        gpu_memory_mib: 81559
        node_labels: {ai-factory.io/pool: h100}
      - name: h100-dra
        product: NVIDIA-H100-80GB-HBM3
        mode: dra
        gpus: 16
        gpu_memory_mib: 81559
        node_labels: {ai-factory.io/pool: h100-dra, nvidia.com/gpu.deploy.device-plugin: "false"}
    gateway: {name: ai-gateway, namespace: gateway-system, hostname: models.example.com}
    pods_ready: {timeout_seconds: 1800, recovery_seconds: 300, requeue_limit: 3}

``pods_ready`` is Kueue's waitForPodsReady (``gitops.specs.PodsReady``). Unknown keys and
wrong types are errors naming the key (``flavors[0].gpus``), so a typo in the file does not
silently become a default. A key that was retired says what replaced it.
"""

from __future__ import annotations

import dataclasses
import logging
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import yaml

from gitops.render.resources import DEVICE_PLUGIN_LABEL
from gitops.render.validate import validate_fleet
from gitops.specs import Flavor, FleetSpec, SpecError

H200_PRODUCT = "NVIDIA-H200"
H200_MEMORY_MIB = 143_771
POOL_LABEL = "ai-factory.io/pool"
# Keys fleet files once had, and what to write instead.
RETIRED_KEYS = {
    (Flavor, "dra"): (
        "The key dra is gone: a device plugin and the NVIDIA DRA driver cannot serve the same "
        "nodes, so DRA GPUs are a pool of their own. Move them to a flavor with mode: dra and "
        f"the node label {DEVICE_PLUGIN_LABEL}: 'false', and delete this key."
    ),
}

logger = logging.getLogger(__name__)


def demo_fleet() -> FleetSpec:
    """16 HGX nodes of 8 H200 in two NVLink domains (topology blocks), in four pools.

    - ``h200``: 8 nodes, 64 whole GPUs (the device plugin);
    - ``h200-mig``: 2 nodes, 16 GPUs in the ``all-balanced`` MIG layout (per GPU 2x 1g.18gb,
      1x 2g.35gb, 1x 3g.71gb), so 32/16/16 slices;
    - ``h200-hami``: 4 nodes, 32 GPUs shared by HAMi, 10 vGPU slots each;
    - ``h200-dra``: 2 nodes, 16 GPUs claimed through the NVIDIA DRA driver, with the device
      plugin off (a device plugin and the DRA driver cannot serve the same nodes).

    Tenants' model-download credentials come from the External Secrets ClusterSecretStore
    ``demo-secrets`` (``gitops.render.secrets``).
    """
    return FleetSpec(
        name="ai-factory",
        vcluster_api_domain="clusters.ai-factory.example.com",
        secret_store="demo-secrets",
        flavors=(
            Flavor(
                name="h200",
                product=H200_PRODUCT,
                mode="whole",
                gpus=64,
                gpu_memory_mib=H200_MEMORY_MIB,
                node_labels=((POOL_LABEL, "h200"),),
            ),
            Flavor(
                name="h200-mig",
                product=H200_PRODUCT,
                mode="mig",
                gpus=16,
                gpu_memory_mib=H200_MEMORY_MIB,
                node_labels=((POOL_LABEL, "h200-mig"), ("nvidia.com/mig.config", "all-balanced")),
                mig_profiles=(("1g.18gb", 32), ("2g.35gb", 16), ("3g.71gb", 16)),
            ),
            Flavor(
                name="h200-hami",
                product=H200_PRODUCT,
                mode="hami",
                gpus=32,
                gpu_memory_mib=H200_MEMORY_MIB,
                # HAMi's device plugin only runs on nodes labelled gpu=on; NVIDIA's must not.
                node_labels=(
                    (POOL_LABEL, "h200-hami"),
                    ("gpu", "on"),
                    (DEVICE_PLUGIN_LABEL, "false"),
                ),
                hami_split=10,
            ),
            Flavor(
                name="h200-dra",
                product=H200_PRODUCT,
                mode="dra",
                gpus=16,
                gpu_memory_mib=H200_MEMORY_MIB,
                node_labels=((POOL_LABEL, "h200-dra"), (DEVICE_PLUGIN_LABEL, "false")),
            ),
        ),
    )


class _Parser:
    """Builds frozen spec dataclasses from parsed YAML, collecting errors per key path."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def dataclass(self, cls: type[Any], data: object, path: str) -> Any:
        if not isinstance(data, Mapping):
            self.errors[path or "(file)"] = "Expected a mapping of keys to values."
            return None
        hints = get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            where = f"{path}.{key}" if path else str(key)
            if (cls, key) in RETIRED_KEYS:
                self.errors[where] = RETIRED_KEYS[cls, key]
                continue
            if key not in fields:
                known = ", ".join(sorted(fields))
                self.errors[where] = f"Unknown key {key!r}; the known keys are: {known}."
                continue
            kwargs[key] = self.value(hints[key], value, where)
        missing = [
            name
            for name, spec_field in fields.items()
            if spec_field.default is dataclasses.MISSING
            and spec_field.default_factory is dataclasses.MISSING
            and name not in kwargs
        ]
        for name in missing:
            self.errors[f"{path}.{name}" if path else name] = "This key is required."
        return None if missing else cls(**kwargs)

    def value(self, hint: Any, value: object, path: str) -> Any:
        origin = get_origin(hint)
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            return self.dataclass(hint, value, path)
        if origin is Literal:
            choices = get_args(hint)
            if value not in choices:
                self.errors[path] = f"Must be one of {', '.join(map(str, choices))}."
            return value
        if origin in (typing.Union, types.UnionType):
            options = [arg for arg in get_args(hint) if arg is not type(None)]
            return None if value is None else self.value(options[0], value, path)
        if origin is tuple:
            return self.tuple(hint, value, path)
        if hint is bool:
            if not isinstance(value, bool):
                self.errors[path] = "Must be true or false."
            return value
        if hint is int:
            if not isinstance(value, int) or isinstance(value, bool):
                self.errors[path] = "Must be a whole number."
            return value
        if hint is str:
            if not isinstance(value, str):
                self.errors[path] = "Must be text (quote it if YAML reads it as something else)."
            return value
        self.errors[path] = f"Cannot read a value of type {hint!r}."
        return value

    def tuple(self, hint: Any, value: object, path: str) -> tuple[Any, ...]:
        args = get_args(hint)
        item = args[0]
        pair = get_origin(item) is tuple and len(get_args(item)) == 2
        if pair and isinstance(value, Mapping):
            # node_labels: {key: value}, mig_profiles: {profile: slices}
            value = list(value.items())
        if isinstance(value, tuple):
            # A spec turned back into data (``flavor_free_fields``) keeps nested tuples.
            value = list(value)
        if not isinstance(value, list):
            self.errors[path] = "Must be a list." if not pair else "Must be a mapping."
            return ()
        if pair:
            key_type, value_type = get_args(item)
            out = []
            for index, entry in enumerate(value):
                where = f"{path}[{index}]"
                if not isinstance(entry, list | tuple) or len(entry) != 2:
                    self.errors[where] = "Must be a key and a value."
                    continue
                out.append(
                    (self.value(key_type, entry[0], where), self.value(value_type, entry[1], where))
                )
            return tuple(out)
        return tuple(
            self.value(item, entry, f"{path}[{index}]") for index, entry in enumerate(value)
        )


def parse_fleet(data: object) -> FleetSpec:
    """A validated FleetSpec from parsed YAML; ``SpecError`` names the offending keys."""
    parser = _Parser()
    fleet = parser.dataclass(FleetSpec, data, "")
    if parser.errors or fleet is None:
        raise SpecError(parser.errors or {"(file)": "The fleet file is empty."})
    validate_fleet(fleet)
    return typing.cast(FleetSpec, fleet)


def load_fleet(path: str | Path) -> FleetSpec:
    """The fleet described by the YAML file at ``path``."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError({"(file)": f"The fleet file is not valid YAML: {exc}"}) from exc
    return parse_fleet(data)


def configured_fleet() -> FleetSpec:
    """The fleet of this installation (``base_fleet()``) with its flavors and topology levels
    as the live inventory last counted them, once it has (``FleetInventory``)."""
    return with_inventory(base_fleet())


def base_fleet() -> FleetSpec:
    """The fleet as configured: ``GITOPS_FLEET_FILE`` or, when unset, the demo fleet named
    ``GITOPS_FLEET_NAME``, reading from ``GITOPS_MAIN_BRANCH``."""
    from django.conf import settings  # late: the renderers never need Django

    path = getattr(settings, "GITOPS_FLEET_FILE", "")
    if path:
        return load_fleet(path)
    return dataclasses.replace(
        demo_fleet(),
        name=getattr(settings, "GITOPS_FLEET_NAME", "ai-factory"),
        git_branch=getattr(settings, "GITOPS_MAIN_BRANCH", "main"),
    )


def with_inventory(base: FleetSpec) -> FleetSpec:
    """``base`` with the stored live inventory's flavors and topology levels, if any."""
    from gitops.models import FleetInventory

    row = FleetInventory.objects.order_by("-pk").first()
    if row is None:
        return base
    try:
        fleet = parse_fleet(
            {
                **flavor_free_fields(base),
                "flavors": row.flavors,
                "topology_levels": row.topology_levels or list(base.topology_levels),
            }
        )
    except SpecError as exc:
        logger.error("the stored fleet inventory is unusable, using the configured one: %s", exc)
        return base
    return fleet


def flavor_free_fields(fleet: FleetSpec) -> dict[str, Any]:
    """The fleet's fields other than flavors and topology, as parse_fleet reads them."""
    data = dataclasses.asdict(fleet)
    data.pop("flavors")
    data.pop("topology_levels")
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def flavor_mapping(flavor: Flavor) -> dict[str, Any]:
    """A flavor as plain data (what ``FleetInventory.flavors`` stores)."""
    data = dataclasses.asdict(flavor)
    data["node_labels"] = dict(flavor.node_labels)
    data["mig_profiles"] = dict(flavor.mig_profiles)
    return data


__all__ = [
    "base_fleet",
    "configured_fleet",
    "demo_fleet",
    "flavor_mapping",
    "load_fleet",
    "parse_fleet",
    "with_inventory",
]
