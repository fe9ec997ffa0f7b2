"""DRA ResourceClaimTemplates (``resource.k8s.io/v1``, GA in Kubernetes 1.34).

A ``dra`` share becomes a template named after the share in the tenant's workloads: a claim
made from it asks for the share's whole count of devices from the NVIDIA driver's DeviceClass,
``gpu.nvidia.com`` for GPUs or ``mig.nvidia.com`` for MIG slices. An endpoint on a DRA share
gets a template of its own sized to one replica (``<endpoint>-gpus``), since every replica
makes its own claim.

Selectors narrow the devices to the flavor: GPUs by product name (the driver reports NVML's
name, e.g. "NVIDIA H200"; GPU feature discovery's label is the same with spaces as dashes, so
both are compared in that form), MIG devices by profile (profile names are specific to a GPU
model already). The product comes from the fleet's configuration, which ``validate_fleet``
restricts to label characters, so it cannot break out of the CEL string literal.

Every template carries ``kustomize.toolkit.fluxcd.io/force: enabled``. The API server refuses
any change to a ResourceClaimTemplate's spec (kubernetes pkg/apis/resource/validation
``ValidateResourceClaimTemplateUpdate`` calls ``ValidateImmutableField`` on ``spec``: "field is
immutable"), and a changed share count or endpoint GPU count renders the same name with a new
spec. kustomize-controller (v1.9, fluxcd/pkg ssa ``shouldForceApply``) deletes and recreates an
object whose dry-run apply fails as immutable when that annotation matches, instead of failing
the whole Kustomization. Claims already made from the template belong to their pods, so the
recreation leaves running pods alone; new pods get the new spec. Why not content-hash names:
see docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from gitops.render import resources
from gitops.render.meta import metadata
from gitops.specs import Flavor, GpuShare, TenantSpec

API = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
# kustomize-controller's recreate-on-immutable-change policy (kustomize-controller v1.9.4
# internal/controller/kustomization_controller.go ``ForceSelector``; values compared ignoring
# case by fluxcd/pkg ssa/utils ``AnyInMetadata``).
FORCE_ANNOTATION = "kustomize.toolkit.fluxcd.io/force"
FORCE_ENABLED = "enabled"


def _selectors(share: GpuShare, flavor: Flavor) -> list[dict[str, Any]]:
    if share.mig_profile:
        expression = f"device.attributes['{DRIVER}'].profile == '{share.mig_profile}'"
    else:
        expression = (
            f"device.attributes['{DRIVER}'].productName.lowerAscii().replace(' ', '-') == "
            f"'{flavor.product.lower()}'"
        )
    return [{"cel": {"expression": expression}}]


def request_name(share: GpuShare) -> str:
    return "mig" if share.mig_profile else "gpu"


def claim_template(
    name: str, tenant: TenantSpec, share: GpuShare, flavor: Flavor, count: int
) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": metadata(
            name, tenant.slug, tenant=tenant.slug, annotations={FORCE_ANNOTATION: FORCE_ENABLED}
        ),
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": request_name(share),
                            "exactly": {
                                "deviceClassName": resources.dra_device_class(share),
                                "allocationMode": "ExactCount",
                                "count": count,
                                "selectors": _selectors(share, flavor),
                            },
                        }
                    ]
                }
            }
        },
    }


def share_template(tenant: TenantSpec, share: GpuShare, flavor: Flavor) -> dict[str, Any]:
    return claim_template(share.name, tenant, share, flavor, share.count)
