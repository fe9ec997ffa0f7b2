"""Batch jobs rendered (gitops/render/jobs.py): a Job or a JobSet as Kueue, Kyverno, Pod
Security and the namespace's quota need it, each bad input refused with the field it is about,
and the objects valid, strictly, against their upstream schemas."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gitops.checks.schema import SchemaRegistry, get_registry, load_crd_file
from gitops.fleet import demo_fleet
from gitops.render import jobs, portal, rbac, tree
from gitops.render.yamlio import load_documents
from gitops.specs import BatchJobSpec, GpuShare, SpecError, TenantSpec
from tests.support.crds import jobset_crd

FLEET = demo_fleet()
TENANT = TenantSpec(
    slug="alpha",
    shares=(
        GpuShare("train", "h200", "whole", 8),
        GpuShare("slices", "h200-mig", "mig", 4, mig_profile="1g.18gb"),
        GpuShare(
            "slots",
            "h200-hami",
            "hami",
            4,
            gpumem_mib=24000,
            gpucores_percent=25,
            borrowing_limit=0,
        ),
        GpuShare("claimed", "h200-dra", "dra", 2),
    ),
)
JOB = BatchJobSpec(
    name="ft-1",
    image="ghcr.io/ai-factory/trainer:1.0",
    share="train",
    gpus=2,
    command=("python", "train.py"),
    args=("--epochs", "3"),
    env=(("EPOCHS", "3"),),
    priority="training",
    template="fine-tuning",
)


def _job(**changes: Any) -> BatchJobSpec:
    return dataclasses.replace(JOB, **changes)


def _errors(**changes: Any) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        jobs.validate_job(_job(**changes), TENANT, FLEET)
    return caught.value.errors


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    if obj["kind"] == "JobSet":
        spec = spec["replicatedJobs"][0]["template"]["spec"]
    template: dict[str, Any] = spec["template"]
    return template


def test_one_node_is_a_suspended_job_in_the_tenant_queue() -> None:
    obj = jobs.render_job(JOB, TENANT, FLEET)
    assert (obj["apiVersion"], obj["kind"]) == ("batch/v1", "Job")
    assert obj["metadata"]["namespace"] == "alpha"
    labels = obj["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "gpu"
    assert labels["kueue.x-k8s.io/priority-class"] == "training"
    assert labels["ai-factory.io/job-template"] == "fine-tuning"
    spec = obj["spec"]
    assert spec["suspend"] is True
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (0, 3600)
    assert spec["ttlSecondsAfterFinished"] == 86400
    pod = _pod(obj)
    # The tenant's Kyverno policy wants the queue label on every GPU pod.
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert pod["spec"]["priorityClassName"] == "training"
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["python", "train.py"]
    assert container["args"] == ["--epochs", "3"]
    assert container["env"] == [{"name": "EPOCHS", "value": "3"}]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
    }
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]
    assert resources["limits"] == {
        "cpu": "4",
        "memory": "32Gi",
        "ephemeral-storage": f"{jobs.EPHEMERAL_GIB}Gi",
        "nvidia.com/gpu": "2",
    }


def test_several_nodes_are_a_jobset_of_one_pod_per_node() -> None:
    obj = jobs.render_job(_job(nodes=4, topology="nvlink-domain"), TENANT, FLEET)
    assert (obj["apiVersion"], obj["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert obj["spec"]["suspend"] is True
    assert obj["spec"]["failurePolicy"] == {"maxRestarts": 0}
    (workers,) = obj["spec"]["replicatedJobs"]
    assert (workers["name"], workers["replicas"]) == ("workers", 4)
    assert workers["template"]["spec"]["parallelism"] == 1
    annotations = _pod(obj)["metadata"]["annotations"]
    # One NVLink domain is the Topology's first level (the demo's topology blocks).
    assert annotations == {
        "kueue.x-k8s.io/podset-required-topology": "network.topology.kubernetes.io/block"
    }
    assert jobs.owner_workloads("JobSet", "ft-1", 2) == [
        "Job/ft-1-workers-0",
        "Job/ft-1-workers-1",
    ]


def test_a_rack_is_the_level_above_the_node() -> None:
    obj = jobs.render_job(_job(nodes=2, topology="rack"), TENANT, FLEET)
    annotations = _pod(obj)["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == (
        "network.topology.kubernetes.io/rack"
    )


def test_gpus_are_asked_as_the_endpoints_ask_them_for_each_share_kind() -> None:
    mig = _pod(jobs.render_job(_job(share="slices", gpus=2), TENANT, FLEET))
    assert mig["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.18gb"] == "2"
    # MIG is only on topology-aware pools here, in a queue with HAMi and DRA flavors too:
    # the pod set asks for TAS itself (gitops.render.kueue.tas_resources).
    assert mig["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-unconstrained-topology": "true"
    }
    hami = _pod(jobs.render_job(_job(share="slots", gpus=2), TENANT, FLEET))
    limits = hami["spec"]["containers"][0]["resources"]["limits"]
    assert {
        k: limits[k] for k in ("nvidia.com/vgpu", "nvidia.com/gpumem", "nvidia.com/gpucores")
    } == {
        "nvidia.com/vgpu": "2",
        "nvidia.com/gpumem": "24000",
        "nvidia.com/gpucores": "25",
    }
    assert "annotations" not in hami["metadata"]
    dra = _pod(jobs.render_job(_job(share="claimed", gpus=2), TENANT, FLEET))
    assert dra["spec"]["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": "claimed"}
    ]
    resources = dra["spec"]["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpus"}]
    assert not any(key.startswith("nvidia.com/") for key in resources["limits"])


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"image": "docker.io/library/python:3.12"}, "image", "allowed registry"),
        ({"image": "ghcr.io/ai-factory/x y:1"}, "image", "no spaces"),
        ({"command": ("python", "-c", "print(1)\nimport os")}, "command[2]", "control"),
        ({"args": ("\u202eevil",)}, "args[0]", "invisible"),
        ({"command": ("x",) * 65}, "command", "at most 64"),
        ({"args": ("y" * 5000,)}, "args[0]", "4096"),
        ({"priority": "inference-critical"}, "priority", "training, batch-low"),
        ({"share": "nope"}, "share", "claimed, slices, slots, train"),
        ({"gpus": 9}, "gpus", "at most 8 whole GPUs"),
        ({"share": "slots", "gpus": 3, "nodes": 2}, "gpus", "exceed what the tenant's shares"),
        ({"share": "claimed", "gpus": 1}, "gpus", "exactly 2"),
        ({"share": "slots", "gpus": 1, "topology": "rack"}, "topology", "no topology-aware"),
        ({"name": "Bad_Name"}, "name", "DNS label"),
        ({"name": "x" * 41}, "name", "at most 40"),
        ({"env": (("HF_TOKEN", "hf_abc"),)}, "env[0]", "no secrets"),
        ({"env": (("CUDA_DISABLE_CONTROL", "1"),)}, "env[0]", "not allowed"),
        ({"env": (("1BAD", "x"),)}, "env[0]", "variable name"),
        ({"env": (("A", "line\nbreak"),)}, "env[0]", "control"),
        ({"deadline_seconds": 10}, "deadline_seconds", "between 60"),
        ({"cpu": 40, "nodes": 2}, "cpu", "exceed the tenant's 64"),
        ({"nodes": 0}, "nodes", "between 1 and 64"),
        ({"gpus": True}, "gpus", "whole number"),
    ],
)
def test_bad_input_is_refused_on_its_field(changes: dict[str, Any], field: str, words: str) -> None:
    errors = _errors(**changes)
    assert words in errors[field], errors


def test_a_template_caps_the_deadline() -> None:
    with pytest.raises(SpecError) as caught:
        jobs.validate_job(_job(deadline_seconds=7200), TENANT, FLEET, max_deadline_seconds=3600)
    assert "between 60 and 3600" in caught.value.errors["deadline_seconds"]


def test_a_dedicated_tenant_gets_the_same_priorities() -> None:
    dedicated = dataclasses.replace(TENANT, trust_level="dedicated")
    jobs.validate_job(_job(priority="batch-low"), dedicated, FLEET)
    with pytest.raises(SpecError):
        jobs.validate_job(_job(priority="inference-critical"), dedicated, FLEET)


def test_the_job_validates_strictly_against_the_kubernetes_schema() -> None:
    registry = get_registry(None, FLEET.kubernetes_version)
    for share, gpus in (("train", 2), ("slices", 1), ("slots", 1), ("claimed", 2)):
        assert registry.validate(jobs.render_job(_job(share=share, gpus=gpus), TENANT, FLEET)) == []
    obj = jobs.render_job(JOB, TENANT, FLEET)
    obj["spec"]["template"]["spec"]["containers"][0]["gpu"] = 1
    (problem,) = registry.validate(obj)
    assert "unknown field 'gpu'" in problem.message


def test_the_jobset_validates_strictly_against_its_crd() -> None:
    registry = SchemaRegistry.from_crds(load_crd_file(jobset_crd()))
    for topology in ("", "nvlink-domain"):
        obj = jobs.render_job(_job(nodes=3, topology=topology), TENANT, FLEET)
        assert registry.validate(obj) == []
    obj["spec"]["replicatedJobs"][0]["replicas"] = "three"
    assert registry.validate(obj)


def test_rbac_lets_the_tenant_job_accounts_act_in_their_namespace_only() -> None:
    runner, reader = rbac.job_roles()
    assert runner["metadata"]["name"] == "ai-factory:job-runner"
    verbs = {
        (r["apiGroups"][0], res): r["verbs"] for r in runner["rules"] for res in r["resources"]
    }
    assert set(verbs[("batch", "jobs")]) == {"get", "list", "watch", "create", "delete"}
    assert set(verbs[("jobset.x-k8s.io", "jobsets")]) == {
        "get",
        "list",
        "watch",
        "create",
        "delete",
    }
    assert verbs[("", "pods/log")] == ["get", "list"]
    assert set(verbs[("kueue.x-k8s.io", "workloads")]) == {"get", "list", "watch"}
    assert not any("create" in r["verbs"] or "delete" in r["verbs"] for r in reader["rules"])
    runners, readers = rbac.job_bindings(TENANT)
    assert runners["metadata"]["namespace"] == "alpha"
    assert runners["subjects"] == [
        {"kind": "ServiceAccount", "name": "ai-factory-job-runner", "namespace": "alpha"}
    ]
    assert readers["subjects"] == [
        {"kind": "ServiceAccount", "name": "ai-factory-job-reader", "namespace": "alpha"}
    ]
    # Members and admins run jobs, viewers read them; nothing else is a tenant role.
    assert rbac.job_account_user("alpha", "admin") == (
        "system:serviceaccount:alpha:ai-factory-job-runner"
    )
    assert rbac.job_account_user("alpha", "member") == rbac.job_account_user("alpha", "admin")
    assert rbac.job_account_user("alpha", "viewer") == (
        "system:serviceaccount:alpha:ai-factory-job-reader"
    )
    with pytest.raises(ValueError, match="not a tenant role"):
        rbac.job_account("owner")


def test_the_job_accounts_are_never_mounted_and_only_the_portal_may_impersonate_them() -> None:
    objects = rbac.tenant_objects(TENANT, FLEET)
    accounts = [o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"]]
    assert {a["metadata"]["name"]: a.get("automountServiceAccountToken") for a in accounts} == {
        "alpha": None,  # the tenant's Flux account, impersonated by kustomize-controller
        "ai-factory-job-runner": False,
        "ai-factory-job-reader": False,
    }
    (role,) = [o for o in objects if o["kind"] == "Role"]
    assert (role["metadata"]["name"], role["metadata"]["namespace"]) == (
        "ai-factory-portal-jobs",
        "alpha",
    )
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts"],
            "verbs": ["impersonate"],
            "resourceNames": ["ai-factory-job-runner", "ai-factory-job-reader"],
        }
    ]
    (binding,) = [
        o
        for o in objects
        if o["kind"] == "RoleBinding" and o["metadata"]["name"] == "ai-factory-portal-jobs"
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "ai-factory-portal-jobs",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "portal", "namespace": "portal-system"}
    ]


def test_the_tree_holds_the_roles_and_the_bindings(schema_dir: Path) -> None:
    files = tree.render_repository(FLEET, [TENANT])
    infra = load_documents(files["infrastructure/configs/rbac.yaml"])
    assert {o["metadata"]["name"] for o in infra} >= {
        "ai-factory:job-runner",
        "ai-factory:job-reader",
    }
    tenant_rbac = load_documents(files["tenants/alpha/rbac.yaml"])
    assert {o["metadata"]["name"] for o in tenant_rbac} >= {
        "ai-factory:job-runners",
        "ai-factory:job-readers",
    }
    registry = get_registry(schema_dir)
    assert [e for o in [*infra, *tenant_rbac] for e in registry.validate(o)] == []


def test_the_portal_impersonates_no_user_or_group_and_its_write_scope_policy_holds() -> None:
    (_, role, *_rest) = portal.rbac_objects(FLEET)
    impersonating = [r for r in role["rules"] if "impersonate" in r["verbs"]]
    # Cluster-wide, only the member's name as one user extra key (any value: people's names).
    assert impersonating == [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["userextras/ai-factory.io/member"],
            "verbs": ["impersonate"],
        }
    ]
    # The policy still matches the portal's own account only. An impersonated request is a
    # tenant job account's, which holds no node or eviction rights to narrow (the job roles
    # are bound in the tenant namespace), and the portal can no longer impersonate anyone who
    # does (system:masters included) to step around the policy.
    policy = portal.write_scope_policy(FLEET)[0]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:portal-system:portal'"
    )
