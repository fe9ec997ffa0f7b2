"""Kyverno policies (``kyverno.io/v1``): fleet-wide ClusterPolicies and each tenant's Policy.

Every rule sets ``validate.failureAction: Enforce`` (the spec-level
``validationFailureAction`` is deprecated in the v1 CRD).

Fleet-wide (``infrastructure/configs``):

- ``forbid-hami-bypass-env``: no container anywhere may set ``CUDA_DISABLE_CONTROL`` (HAMi then
  skips its in-process limiter) or ``GPU_CORE_UTILIZATION_POLICY`` (turns core limiting off);
- ``forbid-envfrom-with-hami``: a container that asks for HAMi resources may not use
  ``envFrom``. A ConfigMap or Secret can carry any variable name, so the env rule cannot see
  what it injects; HAMi-core reads ``GPU_CORE_UTILIZATION_POLICY`` from the process
  environment. Validating the referenced ConfigMaps instead would not hold: their content may
  change after the pod is admitted and is read again when a container restarts, and reading
  Secrets would need Kyverno to read every tenant's Secrets. (HAMi's device plugin itself reads
  ``CUDA_DISABLE_CONTROL`` from the pod spec's ``env`` only, HAMi v2.10.0
  pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go, so the limiter's preload mount
  cannot be switched off through ``envFrom``.) What a container's own command exports is out
  of any admission policy's sight: HAMi's limits stay an in-process limiter, which is why
  dedicated tenants never get HAMi;
- ``protect-litellm-config``: ConfigMaps labelled ``ai-factory.io/litellm-model`` become
  LiteLLM's configuration (``gitops.render.litellm``); the platform's Flux writes them, and a
  service account of the ConfigMap's own namespace (the tenant's Flux) may not;
- ``protect-hami-annotations``: HAMi's scheduler records a pod's devices in ``hami.io/*``
  annotations and the device plugin trusts them. A pod may not be created with them, and a
  service account of the pod's own namespace (a tenant's Flux, a vCluster syncer copying a
  virtual pod's annotations) may not change them later. HAMi itself runs elsewhere.

Per tenant (``tenants/<slug>/kyverno-policy.yaml``, on Pods only: ``autogen`` is off so the
rules mean the same for pods made by a Deployment, a Job or a vCluster):

- ``tolerate-own-nodes`` (a mutation, only while the tenant has nodes of its own) and
  ``confine-reserved-tolerations`` (every tenant): a pod of the tenant tolerates the reserved
  nodes' taint only with its own slug (``gitops.render.reservations``; ``own_nodes_rule``,
  ``reservation_rule``);
- ``request-topology-aware-scheduling`` (a mutation, only while the tenant has such shares): a
  pod that asks for a GPU resource the tenant has only on topology-aware flavors gets
  ``kueue.x-k8s.io/podset-unconstrained-topology: "true"`` unless it already has it. Kueue
  implies TAS only in a queue whose flavors all have it, so in a queue that also holds HAMi or
  DRA flavors such a pod would never be admitted (``gitops.render.kueue``). Kueue builds the
  workload from the pod's annotations after admission (kueue v0.19.2
  pkg/controller/jobframework/tas.go), so the order of the two webhooks does not matter;
- ``require-queue-name``: a pod that asks for GPUs (an ``nvidia.com/*`` limit or a DRA claim)
  must carry ``kueue.x-k8s.io/queue-name``, so it is admitted against the tenant's quota;
- ``disallow-privileged``: no privileged containers;
- ``forbid-hami-bypass-env`` and ``forbid-envfrom-with-hami``: as fleet-wide, so the tenant's
  policy report shows them;
- ``restrict-image-registries``: images only from the fleet's registries (plus the vCluster
  images when the tenant has a cluster);
- ``require-hami-limits``: a container that asks for any HAMi resource asks for all of
  ``nvidia.com/vgpu``, ``nvidia.com/gpumem`` and ``nvidia.com/gpucores``, and not for
  ``nvidia.com/gpumem-percentage``. HAMi's own defaults give a container that names only a
  slot the whole card (``defaultMemory: 0`` is all of its memory and the webhook sets
  ``gpucores`` to 100: HAMi v2.10.0 charts/hami/templates/scheduler/device-configmap.yaml,
  pkg/device/nvidia/device.go ``defaultExclusiveCoreIfNeeded``/``GenerateResourceRequests``),
  while Kueue and the quota charge one slot. Memory as a percentage is counted by neither, so
  it is refused with the reason;
- ``cap-hami-slot-size`` (only while the tenant has HAMi shares): HAMi gives every vGPU of a
  container the ``gpumem``/``gpucores`` it names, while Kueue and the quota charge the
  container's one value, so a container asks at most the largest slot of the tenant's HAMi
  shares per vGPU (``gitops.render.resources.hami_slot_caps``): ``vgpu: 4, gpumem: 96000``
  against a share of 24000 MiB slots would hold 384000 MiB while charged 96000;
- ``limit-gpus-per-pod``: ``nvidia.com/gpu`` (whole GPUs) summed over a pod's containers at
  most the tenant's whole-GPU quota, and never above the fleet's per-tenant cap;
- ``restrict-priority-classes`` and, for shared tenants, ``inference-priority-for-model-servers``:
  the priority classes (pod and Kueue) a tenant's pods may name by trust level, and
  ``inference-critical`` only on model servers (``priority_rules``);
- ``confine-route-backends``: an HTTPRoute's backends (and mirrors) are ``Service``s of the
  tenant's own namespace;
- ``confine-network-attachments`` (on fleets with a ``fabric``): a pod names Multus
  attachments of its own namespace only (``gitops.render.fabric.own_namespace_rule``);
- ``confine-http-routes``: an HTTPRoute of the tenant names exactly the tenant's own host
  ``<slug>.<gateway hostname>`` and carries the tenant label (the same rule as the isolation
  check, in the cluster: a route on a shared host could take another tenant's requests, and
  the gateway's key check selects routes by the label).

In ``tenant-creators`` (background off: the rules read who asks), for the namespace's own
service accounts only: ``reserve-platform-labels`` and ``require-service-selectors``
(``tenant_creator_rules``).

The JMESPath expressions follow the kyverno/policies library; they are data here, never text
assembled around user input (the only inputs are fleet settings and numbers).
"""

from __future__ import annotations

from typing import Any

import yaml

from gitops.render import fabric, kueue, reservations, resources, vcluster
from gitops.render.gateway import tenant_host
from gitops.render.meta import (
    LITELLM_MODEL_LABEL,
    LOCAL_QUEUE,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
    TENANT_LABEL,
    metadata,
)
from gitops.specs import FleetSpec, TenantSpec

API = "kyverno.io/v1"
TENANT_POLICY = "tenant-guardrails"
HAMI_BYPASS_ENV = ("CUDA_DISABLE_CONTROL", "GPU_CORE_UTILIZATION_POLICY")
HAMI_INTERNAL_ANNOTATIONS = (
    "hami.io/bind-phase",
    "hami.io/bind-time",
    "hami.io/vgpu-devices-allocated",
    "hami.io/vgpu-devices-to-allocate",
    "hami.io/vgpu-node",
    "hami.io/vgpu-time",
)
VCLUSTER_IMAGE_PREFIXES = ("ghcr.io/loft-sh/", "coredns/coredns:")
_ALL_CONTAINERS = "request.object.spec.[ephemeralContainers, initContainers, containers][]"
_PODS = {"any": [{"resources": {"kinds": ["Pod"]}}]}
# Preconditions: the request comes from a service account of the object's own namespace (a
# tenant's Flux, a vCluster syncer, a tenant pod), not from a platform controller.
_FROM_OWN_NAMESPACE = {
    "all": [
        {
            "key": "{{ request.userInfo.username }}",
            "operator": "AnyIn",
            "value": ["system:serviceaccount:{{ request.namespace }}:*"],
        }
    ]
}


def _enforce(message: str, **rule: Any) -> dict[str, Any]:
    return {"failureAction": "Enforce", "message": message, **rule}


def _env_rule() -> dict[str, Any]:
    return {
        "name": "forbid-hami-bypass-env",
        "match": _PODS,
        "validate": _enforce(
            f"The environment variables {', '.join(HAMI_BYPASS_ENV)} switch off GPU sharing "
            "limits and are not allowed.",
            deny={
                "conditions": {
                    "any": [
                        {
                            "key": f"{{{{ {_ALL_CONTAINERS}.env[].name || `[]` }}}}",
                            "operator": "AnyIn",
                            "value": list(HAMI_BYPASS_ENV),
                        }
                    ]
                }
            },
        ),
    }


_HAMI_CONTAINERS = "request.object.spec.[initContainers, containers][]"
_ELEMENT_LIMITS = "{{ keys(element.resources.limits || `{}`) }}"


def _hami_foreach(deny_any: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A ``validate.foreach`` over the containers that ask for a HAMi resource."""
    return [
        {
            "list": _HAMI_CONTAINERS,
            "preconditions": {
                "any": [
                    {
                        "key": _ELEMENT_LIMITS,
                        "operator": "AnyIn",
                        "value": list(resources.HAMI_RESOURCES),
                    },
                    {
                        "key": "{{ keys(element.resources.requests || `{}`) }}",
                        "operator": "AnyIn",
                        "value": list(resources.HAMI_RESOURCES),
                    },
                ]
            },
            "deny": {"conditions": {"any": deny_any}},
        }
    ]


def _envfrom_rule() -> dict[str, Any]:
    return {
        "name": "forbid-envfrom-with-hami",
        "match": _PODS,
        "validate": _enforce(
            "Containers that use shared GPUs (HAMi) may not take environment variables from "
            "ConfigMaps or Secrets (envFrom): list each variable under env instead.",
            foreach=_hami_foreach(
                [
                    {
                        "key": "{{ length(element.envFrom || `[]`) }}",
                        "operator": "GreaterThan",
                        "value": 0,
                    }
                ]
            ),
        ),
    }


def _hami_limits_rule() -> dict[str, Any]:
    required = (resources.VGPU, resources.GPUMEM, resources.GPUCORES)
    return {
        "name": "require-hami-limits",
        "match": _PODS,
        "validate": _enforce(
            f"A container on shared GPUs must set the limits {', '.join(required)} (MiB and "
            f"percent per vGPU), so it gets the slot it is charged for; "
            f"{resources.GPUMEM_PERCENTAGE} is not counted by the quota and is not allowed.",
            foreach=_hami_foreach(
                [
                    *(
                        {"key": name, "operator": "AnyNotIn", "value": _ELEMENT_LIMITS}
                        for name in required
                    ),
                    {
                        "key": resources.GPUMEM_PERCENTAGE,
                        "operator": "AnyIn",
                        "value": _ELEMENT_LIMITS,
                    },
                ]
            ),
        ),
    }


def _hami_slot_rule(memory_mib: int, cores_percent: int) -> dict[str, Any]:
    """Each HAMi container asks at most one slot's memory and cores per vGPU (see
    ``gitops.render.resources.hami_slot_caps``)."""
    return {
        "name": "cap-hami-slot-size",
        "match": _PODS,
        "validate": _enforce(
            f"HAMi gives every vGPU of a container the {resources.GPUMEM} and "
            f"{resources.GPUCORES} it names: per vGPU this tenant may ask at most "
            f"{memory_mib} MiB and {cores_percent} %, the largest slot of its shares "
            f"(ask for more {resources.VGPU} instead).",
            foreach=_hami_foreach(
                [
                    {
                        "key": f"{{{{ element.resources.limits.\"{name}\" || '0' }}}}",
                        "operator": "GreaterThan",
                        # A quantity, not a number: the API server hands Kyverno quantities in
                        # canonical form (96000 is "96k"), which compares with a quantity only.
                        "value": str(cap),
                    }
                    for name, cap in (
                        (resources.GPUMEM, memory_mib),
                        (resources.GPUCORES, cores_percent),
                    )
                ]
            ),
        ),
    }


def _annotation(source: str, key: str) -> str:
    return f"{{{{ {source}.metadata.annotations.\"{key}\" || '' }}}}"


def cluster_policies() -> list[dict[str, Any]]:
    protect = {
        "apiVersion": API,
        "kind": "ClusterPolicy",
        "metadata": metadata("protect-hami-annotations"),
        "spec": {
            # The rules read the request's operation and user, which a background scan lacks.
            "background": False,
            "rules": [
                {
                    "name": "no-hami-annotations-on-create",
                    "match": {"any": [{"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}}]},
                    "validate": _enforce(
                        "The hami.io/ scheduling annotations are written by HAMi; a new pod may "
                        "not carry them.",
                        deny={
                            "conditions": {
                                "any": [
                                    {
                                        "key": _annotation("request.object", key),
                                        "operator": "NotEquals",
                                        "value": "",
                                    }
                                    for key in HAMI_INTERNAL_ANNOTATIONS
                                ]
                            }
                        },
                    ),
                },
                {
                    "name": "no-hami-annotation-changes-from-the-namespace",
                    "match": {"any": [{"resources": {"kinds": ["Pod"], "operations": ["UPDATE"]}}]},
                    "preconditions": _FROM_OWN_NAMESPACE,
                    "validate": _enforce(
                        "The hami.io/ scheduling annotations are written by HAMi; workloads in "
                        "the pod's namespace may not change them.",
                        deny={
                            "conditions": {
                                "any": [
                                    {
                                        "key": _annotation("request.object", key),
                                        "operator": "NotEquals",
                                        "value": _annotation("request.oldObject", key),
                                    }
                                    for key in HAMI_INTERNAL_ANNOTATIONS
                                ]
                            }
                        },
                    ),
                },
            ],
        },
    }
    bypass = {
        "apiVersion": API,
        "kind": "ClusterPolicy",
        "metadata": metadata("forbid-hami-bypass-env"),
        "spec": {"background": True, "rules": [_env_rule(), _envfrom_rule()]},
    }
    litellm = {
        "apiVersion": API,
        "kind": "ClusterPolicy",
        "metadata": metadata("protect-litellm-config"),
        "spec": {
            # The rule reads the request's user, which a background scan lacks.
            "background": False,
            "rules": [
                {
                    "name": "no-litellm-config-from-the-namespace",
                    "match": {
                        "any": [
                            {
                                "resources": {
                                    "kinds": ["ConfigMap"],
                                    "operations": ["CREATE", "UPDATE"],
                                    "selector": {"matchLabels": {LITELLM_MODEL_LABEL: "?*"}},
                                }
                            }
                        ]
                    },
                    "preconditions": _FROM_OWN_NAMESPACE,
                    "validate": _enforce(
                        "LiteLLM model configuration is written by the platform; workloads in "
                        "the namespace may not create or change it.",
                        # An empty deny refuses every matched request (kyverno/policies
                        # other/block-updates-deletes does the same).
                        deny={},
                    ),
                }
            ],
        },
    }
    return [bypass, litellm, protect]


def gpu_cap(tenant: TenantSpec, fleet: FleetSpec) -> int:
    """The most ``nvidia.com/gpu`` (whole GPUs; HAMi slots are ``nvidia.com/vgpu``) one pod of
    the tenant may ask for."""
    granted = sum(resources.kueue_resources(share).get(resources.GPU, 0) for share in tenant.shares)
    granted += sum(reservations.reserved_gpus(tenant).values())
    return min(granted, fleet.max_gpus_per_tenant)


def image_patterns(tenant: TenantSpec, fleet: FleetSpec) -> str:
    patterns = [f"{prefix}*" for prefix in fleet.allowed_registries]
    if tenant.clusters:
        patterns.extend(f"{prefix}*" for prefix in VCLUSTER_IMAGE_PREFIXES)
        # Exactly the image vCluster's syncer adds to pods with a subdomain (see vcluster.py).
        patterns.append(fleet.vcluster_hosts_image)
    return " | ".join(sorted(set(patterns)))


# Who creates the pods and the StatefulSet of a vCluster control plane: the StatefulSet
# controller (kube-controller-manager with per-controller credentials, its default) and
# helm-controller, as which the platform's HelmRelease installs the chart (vcluster.py).
STATEFULSET_CONTROLLER = "system:serviceaccount:kube-system:statefulset-controller"
HELM_CONTROLLER = "system:serviceaccount:flux-system:helm-controller"
POD_CONTROLLER_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")
_TEMPLATE_ACCOUNTS = (
    "{{ [request.object.spec.template.spec.serviceAccountName, "
    "request.object.spec.jobTemplate.spec.template.spec.serviceAccountName][] || `[]` }}"
)


VCLUSTER_ACCOUNTS_POLICY = "vcluster-accounts"


def tenant_policies(tenant: TenantSpec, fleet: FleetSpec) -> list[dict[str, Any]]:
    """Everything in ``kyverno-policy.yaml``: the guardrails, what the tenant's accounts may
    create, and the vCluster account guard while the tenant has clusters."""
    policies = [tenant_policy(tenant, fleet)]
    for name, rules in (
        (TENANT_CREATORS_POLICY, tenant_creator_rules(tenant)),
        (VCLUSTER_ACCOUNTS_POLICY, vcluster_account_rules(tenant)),
    ):
        if rules:
            policies.append(
                {
                    "apiVersion": API,
                    "kind": "Policy",
                    "metadata": metadata(
                        name,
                        tenant.slug,
                        tenant=tenant.slug,
                        annotations={"pod-policies.kyverno.io/autogen-controllers": "none"},
                    ),
                    # The rules read the requesting user, which a background scan does not
                    # have (Kyverno refuses userInfo in background policies).
                    "spec": {"background": False, "rules": rules},
                }
            )
    return policies


KUEUE_GATE_PREFIX = "kueue.x-k8s.io/"


def _kueue_gates(source: str) -> str:
    return (
        f"{{{{ {source}.spec.schedulingGates[?starts_with(name, '{KUEUE_GATE_PREFIX}')].name "
        "|| `[]` }}"
    )


def vcluster_gate_rule(tenant: TenantSpec) -> dict[str, Any]:
    """A tenant cluster's syncer may not lift any of Kueue's scheduling gates.

    Kueue gates a host pod until its workload is admitted (``kueue.x-k8s.io/admission``), and
    until topology-aware scheduling has placed it (``kueue.x-k8s.io/topology``); it has others
    (``elastic-job``, ``multikueue``, ``concurrent-admission``: kueue v0.19.2
    apis/kueue/v1beta2/constants.go, topology_types.go, pkg/controller/constants). vCluster's
    pods syncer, on every later update of the host pod, sets its ``schedulingGates`` to the
    virtual pod's (loft-sh/vcluster v0.35.3 ``pkg/controllers/resources/pods/translate/diff.go``
    ``calcSpecDiff``), and the virtual pod has none: a gate would go and the pod would run
    unadmitted, outside the tenant's quota, or off its topology. Only Kueue removes them; the
    syncer's update is refused while it would drop one (it retries).
    """
    syncers = [
        f"system:serviceaccount:{tenant.slug}:{vcluster.service_account(cluster)}"
        for cluster in sorted(tenant.clusters, key=lambda c: c.name)
    ]
    return {
        "name": "vcluster-keeps-kueue-gates",
        "match": {"any": [{"resources": {"kinds": ["Pod"], "operations": ["UPDATE"]}}]},
        "preconditions": {
            "all": [
                {"key": "{{ request.userInfo.username }}", "operator": "AnyIn", "value": syncers}
            ]
        },
        "validate": _enforce(
            f"Only Kueue may remove its scheduling gates ({KUEUE_GATE_PREFIX}*) from a pod.",
            deny={
                "conditions": {
                    "all": [
                        {
                            "key": _kueue_gates("request.oldObject"),
                            "operator": "AnyNotIn",
                            "value": "{{ request.object.spec.schedulingGates[].name || `[]` }}",
                        },
                    ]
                }
            },
        ),
    }


def vcluster_account_rules(tenant: TenantSpec) -> list[dict[str, Any]]:
    """No tenant workload runs as a vCluster control plane's service account.

    The chart binds ``vc-<cluster>`` to a Role with pods, pods/exec and secrets in the tenant
    namespace (loft-sh/vcluster ``chart/templates/role.yaml``); a pod that names that account
    gets its token. Only the StatefulSet controller may create such a pod, and only
    helm-controller the workload object whose template names it (a tenant could otherwise
    write a StatefulSet of its own and let the controller create the pod)."""
    accounts = sorted(vcluster.service_account(cluster) for cluster in tenant.clusters)
    if not accounts:
        return []
    return [
        vcluster_gate_rule(tenant),
        {
            "name": "vcluster-account-pods",
            "match": {"any": [{"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}}]},
            "validate": _enforce(
                "Only a vCluster's own control plane may run as its service account.",
                deny={
                    "conditions": {
                        "all": [
                            {
                                "key": "{{ request.object.spec.serviceAccountName || '' }}",
                                "operator": "AnyIn",
                                "value": accounts,
                            },
                            {
                                "key": "{{ request.userInfo.username }}",
                                "operator": "NotEquals",
                                "value": STATEFULSET_CONTROLLER,
                            },
                        ]
                    }
                },
            ),
        },
        {
            "name": "vcluster-account-templates",
            "match": {
                "any": [
                    {
                        "resources": {
                            "kinds": list(POD_CONTROLLER_KINDS),
                            "operations": ["CREATE", "UPDATE"],
                        }
                    }
                ]
            },
            "validate": _enforce(
                "Workloads may not run as a vCluster's service account; the platform installs "
                "the vCluster.",
                deny={
                    "conditions": {
                        "all": [
                            {"key": _TEMPLATE_ACCOUNTS, "operator": "AnyIn", "value": accounts},
                            {
                                "key": "{{ request.userInfo.username }}",
                                "operator": "NotEquals",
                                "value": HELM_CONTROLLER,
                            },
                        ]
                    }
                },
            ),
        },
    ]


def _limits_any_in(names: list[str]) -> dict[str, Any]:
    """A precondition: some container of the pod has a limit on one of ``names``
    (wildcards allowed). The pipe and filter keep ``keys`` off a missing init container list or
    a container without limits: Kyverno's JMESPath fails the expression there, and the
    ``|| []`` then made the precondition false for every pod without init containers."""
    return {
        "key": "{{ request.object.spec.[initContainers, containers][] | [?resources.limits]"
        ".resources.limits.keys(@)[] || `[]` }}",
        "operator": "AnyIn",
        "value": names,
    }


def _tas_request_rule(tas: tuple[str, ...]) -> dict[str, Any]:
    return {
        "name": "request-topology-aware-scheduling",
        "match": _PODS,
        "preconditions": {"any": [_limits_any_in(list(tas))]},
        # "+( )" adds the annotation only where the pod does not set it (Kyverno's "add if not
        # present" anchor, kyverno.io/docs/writing-policies/mutate).
        "mutate": {
            "patchStrategicMerge": {
                "metadata": {"annotations": {f"+({kueue.TAS_REQUEST_ANNOTATION})": "true"}}
            }
        },
    }


_BACKEND_REFS = (
    "request.object.spec.rules[].[backendRefs[], filters[].requestMirror.backendRef][][]"
)


def _route_backends_rule(tenant: TenantSpec) -> dict[str, Any]:
    """An HTTPRoute's backends are Services of the tenant's namespace (with ``tenant-creators``
    refusing selectorless ones, a route reaches only pods the tenant runs)."""
    return {
        "name": "confine-route-backends",
        "match": {"any": [{"resources": {"kinds": ["gateway.networking.k8s.io/v1/HTTPRoute"]}}]},
        "validate": _enforce(
            f"An HTTPRoute of this tenant may only send requests to Services in {tenant.slug}.",
            deny={
                "conditions": {
                    "any": [
                        {
                            "key": f"{{{{ {_BACKEND_REFS}.kind || `[]` }}}}",
                            "operator": "AnyNotIn",
                            "value": ["Service"],
                        },
                        {
                            "key": f"{{{{ {_BACKEND_REFS}.group || `[]` }}}}",
                            "operator": "AnyNotIn",
                            "value": ["", "core"],
                        },
                        {
                            "key": f"{{{{ {_BACKEND_REFS}.namespace || `[]` }}}}",
                            "operator": "AnyNotIn",
                            "value": [tenant.slug],
                        },
                    ]
                }
            },
        ),
    }


# Labels the tenant's NetworkPolicies select platform pods by (gitops.render.network): KServe
# puts the first on predictor pods, the vCluster chart the second on control planes.
RESERVED_LABEL_KEYS = ("serving.kserve.io/inferenceservice",)
RESERVED_LABELS = (("app", "vcluster"),)
_ALL_LABELS = (
    "request.object.[metadata.labels, spec.template.metadata.labels, "
    "spec.jobTemplate.spec.template.metadata.labels][?@]"
)
TENANT_CREATORS_POLICY = "tenant-creators"


def tenant_creator_rules(tenant: TenantSpec) -> list[dict[str, Any]]:
    """What the tenant's own accounts (its Flux, its vCluster syncers, its pods) may create in
    its namespace, beyond RBAC: no pod or pod template with the labels the NetworkPolicies
    trust (see ``gitops.render.network``), and no Service a route could use to reach what the
    tenant does not run (an ``ExternalName``, or a Service without a selector, whose endpoints
    anyone may write; vCluster would sync a virtual one's verbatim, ``gitops.render.vcluster``).
    Platform controllers (KServe's, helm-controller, the ReplicaSet and StatefulSet
    controllers) are not the namespace's accounts and are not affected."""
    on_create_or_update = ["CREATE", "UPDATE"]
    return [
        {
            "name": "reserve-platform-labels",
            "match": {
                "any": [
                    {
                        "resources": {
                            "kinds": ["Pod", *POD_CONTROLLER_KINDS],
                            "operations": on_create_or_update,
                        }
                    }
                ]
            },
            "preconditions": _FROM_OWN_NAMESPACE,
            "validate": _enforce(
                "The labels "
                + ", ".join([*RESERVED_LABEL_KEYS, *(f"{k}: {v}" for k, v in RESERVED_LABELS)])
                + " mark the platform's model servers and tenant-cluster control planes, whose "
                "network access depends on them; tenant workloads may not carry them.",
                deny={
                    "conditions": {
                        "any": [
                            {
                                "key": f"{{{{ {_ALL_LABELS}.keys(@)[] || `[]` }}}}",
                                "operator": "AnyIn",
                                "value": list(RESERVED_LABEL_KEYS),
                            },
                            *(
                                {
                                    "key": f'{{{{ {_ALL_LABELS}."{key}" || `[]` }}}}',
                                    "operator": "AnyIn",
                                    "value": [value],
                                }
                                for key, value in RESERVED_LABELS
                            ),
                        ]
                    }
                },
            ),
        },
        {
            "name": "require-service-selectors",
            "match": {
                "any": [{"resources": {"kinds": ["Service"], "operations": on_create_or_update}}]
            },
            "preconditions": _FROM_OWN_NAMESPACE,
            "validate": _enforce(
                f"Services in {tenant.slug} select the tenant's pods: a Service without a "
                "selector, or of type ExternalName, could point a route at any address.",
                deny={
                    "conditions": {
                        "any": [
                            {
                                "key": "{{ request.object.spec.type || 'ClusterIP' }}",
                                "operator": "Equals",
                                "value": "ExternalName",
                            },
                            {
                                "key": "{{ length(request.object.spec.selector || `{}`) }}",
                                "operator": "Equals",
                                "value": 0,
                            },
                        ]
                    }
                },
            ),
        },
    ]


def priority_rules(tenant: TenantSpec) -> list[dict[str, Any]]:
    """Which priority classes the tenant's pods may name, by its trust level
    (``gitops.render.kueue.TRUST_PRIORITIES``): the pod's ``priorityClassName`` (kube-scheduler's
    preemption on a node, the kubelet's eviction order) and its ``kueue.x-k8s.io/priority-class``
    label (Kueue's order and preemption) alike. ``inference-critical`` is for model servers:
    pods KServe creates carry ``serving.kserve.io/inferenceservice``, which the tenant's own
    accounts may not set (``tenant-creators``)."""
    allowed = kueue.TRUST_PRIORITIES[tenant.trust_level]
    names = (
        "{{ request.object.spec.priorityClassName || '' }}",
        f"{{{{ request.object.metadata.labels.\"{PRIORITY_CLASS_LABEL}\" || '' }}}}",
    )
    rules: list[dict[str, Any]] = [
        {
            "name": "restrict-priority-classes",
            "match": _PODS,
            "validate": _enforce(
                f"Pods of a {tenant.trust_level} tenant may name the priority classes "
                f"{', '.join(allowed)} (model servers also {kueue.INFERENCE_PRIORITY}).",
                deny={
                    "conditions": {
                        "any": [
                            {
                                "key": key,
                                "operator": "AnyNotIn",
                                "value": ["", *sorted({*allowed, kueue.INFERENCE_PRIORITY})],
                            }
                            for key in names
                        ]
                    }
                },
            ),
        }
    ]
    if kueue.INFERENCE_PRIORITY not in allowed:
        rules.append(
            {
                "name": "inference-priority-for-model-servers",
                "match": _PODS,
                "preconditions": {
                    "any": [
                        {"key": key, "operator": "Equals", "value": kueue.INFERENCE_PRIORITY}
                        for key in names
                    ]
                },
                "validate": _enforce(
                    f"Only model servers (pods KServe creates for an endpoint) may use "
                    f"{kueue.INFERENCE_PRIORITY}: it preempts other tenants' work.",
                    deny={
                        "conditions": {
                            "all": [
                                {
                                    "key": f"{{{{ request.object.metadata.labels."
                                    f"\"{RESERVED_LABEL_KEYS[0]}\" || '' }}}}",
                                    "operator": "Equals",
                                    "value": "",
                                }
                            ]
                        }
                    },
                ),
            }
        )
    return rules


_TOLERATIONS = "request.object.spec.tolerations || `[]`"


def own_nodes_rule(tenant: TenantSpec) -> dict[str, Any]:
    """``tolerate-own-nodes`` (a mutation, only while the tenant has nodes of its own): a pod
    created without GPUs and without a toleration of the reservation key gets the tenant's
    own, so its pods that Kueue does not admit may run on its nodes too. GPU pods are left to
    Kueue, which adds the toleration only to those it admits on the tenant's own flavor: one
    admitted against the shared pool's quota must not take a reserved node's GPUs. A JSON
    patch appending to ``spec.tolerations``: a strategic merge would replace the list
    (tolerations have no merge key), and Kyverno creates the list when the pod has none
    (``EnsurePathExistsOnAdd``, kyverno v1.19.0 pkg/engine/mutate/patch/patchJSON6902.go).
    The value is the tenant's slug, written as data and dumped, never pasted into the text."""
    patch = [
        {"op": "add", "path": "/spec/tolerations/-", "value": reservations.toleration(tenant.slug)}
    ]
    return {
        "name": "tolerate-own-nodes",
        "match": {"any": [{"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}}]},
        "preconditions": {
            "all": [
                {
                    "key": f"{{{{ ({_TOLERATIONS})[].key }}}}",
                    "operator": "AllNotIn",
                    "value": [reservations.RESERVED_KEY],
                },
                {**_limits_any_in(["nvidia.com/*"]), "operator": "AllNotIn"},
                {
                    "key": "{{ length(request.object.spec.resourceClaims || `[]`) }}",
                    "operator": "Equals",
                    "value": 0,
                },
            ]
        },
        "mutate": {"patchesJson6902": yaml.safe_dump(patch, sort_keys=True)},
    }


def reservation_rule(tenant: TenantSpec) -> dict[str, Any]:
    """``confine-reserved-tolerations``: the tenant's pods tolerate the reservation taint
    (``gitops.render.reservations``) only with the tenant's own slug, and only while it has
    nodes of its own; never with ``Exists`` on that key, nor with a key-less ``Exists``, which
    tolerates every taint (k8s.io/api core/v1 ``Toleration.ToleratesTaint``: an empty key with
    ``Exists`` matches all keys). Kueue adds the toleration to the pods it admits on the
    tenant's own flavor, in the tenant's namespace, which this rule lets through; a pod of
    any other tenant tolerating it is refused, so it can never land on those nodes. On every
    tenant, so that a shared tenant's policy refuses it too."""
    own = [tenant.slug] if tenant.reservations else []
    key = reservations.RESERVED_KEY
    return {
        "name": "confine-reserved-tolerations",
        "match": _PODS,
        "validate": _enforce(
            f"Only pods of the tenant a node is reserved for may tolerate {key} (this "
            f"tenant's pods: {'only ' + tenant.slug if own else 'never'}), and no pod may "
            "tolerate every taint.",
            deny={
                "conditions": {
                    "any": [
                        {
                            "key": f"{{{{ ({_TOLERATIONS})[?key == '{key}'].value }}}}",
                            "operator": "AnyNotIn",
                            "value": own,
                        },
                        {
                            # Exists, or no value: the first condition does not see these.
                            "key": f"{{{{ length(({_TOLERATIONS})[?key == '{key}' && "
                            "((operator || '') == 'Exists' || (value || '') == '')]) }}",
                            "operator": "GreaterThan",
                            "value": 0,
                        },
                        {
                            "key": f"{{{{ length(({_TOLERATIONS})[?(key || '') == '' && "
                            "(operator || '') == 'Exists']) }}",
                            "operator": "GreaterThan",
                            "value": 0,
                        },
                    ]
                }
            },
        ),
    }


def tenant_policy(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, Any]:
    images = image_patterns(tenant, fleet)
    cap = gpu_cap(tenant, fleet)
    rules = [
        {
            "name": "require-queue-name",
            "match": _PODS,
            "preconditions": {
                "any": [
                    _limits_any_in(["nvidia.com/*"]),
                    {
                        "key": "{{ length(request.object.spec.resourceClaims || `[]`) }}",
                        "operator": "GreaterThan",
                        "value": 0,
                    },
                ]
            },
            "validate": _enforce(
                f"Pods that use GPUs must carry the label {QUEUE_NAME_LABEL} (the tenant's "
                f"queue is named {LOCAL_QUEUE!r}).",
                pattern={"metadata": {"labels": {QUEUE_NAME_LABEL: "?*"}}},
            ),
        },
        {
            "name": "disallow-privileged",
            "match": _PODS,
            "validate": _enforce(
                "Privileged containers are not allowed.",
                pattern={
                    "spec": {
                        "=(ephemeralContainers)": [
                            {"=(securityContext)": {"=(privileged)": "false"}}
                        ],
                        "=(initContainers)": [{"=(securityContext)": {"=(privileged)": "false"}}],
                        "containers": [{"=(securityContext)": {"=(privileged)": "false"}}],
                    }
                },
            ),
        },
        _env_rule(),
        _envfrom_rule(),
        _hami_limits_rule(),
        {
            "name": "restrict-image-registries",
            "match": _PODS,
            "validate": _enforce(
                f"Images must come from an allowed registry: {images}.",
                pattern={
                    "spec": {
                        "=(ephemeralContainers)": [{"image": images}],
                        "=(initContainers)": [{"image": images}],
                        "containers": [{"image": images}],
                    }
                },
            ),
        },
        {
            "name": "limit-gpus-per-pod",
            "match": _PODS,
            "validate": _enforce(
                f"A pod of this tenant may use at most {cap} nvidia.com/gpu.",
                deny={
                    "conditions": {
                        "any": [
                            {
                                "key": "{{ sum(request.object.spec.containers[].resources.limits"
                                '."nvidia.com/gpu".to_number(@) || `[0]`) }}',
                                "operator": "GreaterThan",
                                "value": cap,
                            }
                        ]
                    }
                },
            ),
        },
    ]
    slot = resources.hami_slot_caps(tenant.shares)
    if slot is not None:
        rules.insert(rules.index(_hami_limits_rule()) + 1, _hami_slot_rule(*slot))
    tas = kueue.tas_resources(tenant, fleet)
    if tas:
        rules.insert(0, _tas_request_rule(tas))
    if tenant.reservations:
        rules.insert(0, own_nodes_rule(tenant))
    host = tenant_host(tenant.slug, fleet)
    rules.append(
        {
            "name": "confine-http-routes",
            "match": {
                "any": [{"resources": {"kinds": ["gateway.networking.k8s.io/v1/HTTPRoute"]}}]
            },
            "validate": _enforce(
                f"HTTPRoutes of this tenant must list exactly the host {host} and carry the "
                f"label {TENANT_LABEL}: {tenant.slug}.",
                deny={
                    "conditions": {
                        "any": [
                            {
                                "key": "{{ length(request.object.spec.hostnames || `[]`) }}",
                                "operator": "Equals",
                                "value": 0,
                            },
                            {
                                "key": "{{ request.object.spec.hostnames || `[]` }}",
                                "operator": "AnyNotIn",
                                "value": [host],
                            },
                            {
                                "key": f'{{{{ request.object.metadata.labels."{TENANT_LABEL}"'
                                " || '' }}",
                                "operator": "NotEquals",
                                "value": tenant.slug,
                            },
                        ]
                    }
                },
            ),
        }
    )
    rules.append(_route_backends_rule(tenant))
    rules.extend(priority_rules(tenant))
    if fleet.fabric is not None:
        rules.append(fabric.own_namespace_rule())
    rules.append(reservation_rule(tenant))
    return {
        "apiVersion": API,
        "kind": "Policy",
        "metadata": metadata(
            TENANT_POLICY,
            tenant.slug,
            tenant=tenant.slug,
            annotations={"pod-policies.kyverno.io/autogen-controllers": "none"},
        ),
        "spec": {"background": True, "rules": rules},
    }
