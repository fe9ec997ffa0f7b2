"""The simulator's API as a client submitting run-once work sees it, over HTTP: creates with
their checks, admission and dry runs; deletes with propagation and the garbage collector;
impersonation and RBAC; pod logs; discovery."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from simulator import Simulator
from simulator.admission import WebhookUnreachable, cluster_ip
from simulator.config import SimConfig
from simulator.gc import JOB_DELETE_WARNING
from simulator.store import (
    CLUSTER_POLICIES,
    JOBS,
    JOBSETS,
    PODS,
    RESOURCE_QUOTAS,
    ROLE_BINDINGS,
    ROLES,
    WORKLOADS,
    JsonObject,
    Resource,
    timestamp,
)

TOKEN = "s3cret"
NOW = 1_760_000_000.0
JOBS_PATH = "/apis/batch/v1/namespaces/alpha/jobs"
MEMBER = "ann@example.com"
MEMBERS = "tenant:alpha:members"


@dataclasses.dataclass
class Answer:
    status: int
    body: bytes
    headers: Any

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@pytest.fixture
def sim() -> Iterator[Simulator]:
    """The demo fleet with a token, no Flux, a clock fixed at ``NOW`` and namespace alpha."""
    config = dataclasses.replace(SimConfig.demo(), flux_delay=0, ready_delay=0, recreate_delay=0)
    simulator = Simulator(config, token=TOKEN, clock=lambda: NOW)
    simulator.cluster.ensure_namespace("alpha", NOW)
    simulator.cluster.ensure_namespace("beta", NOW)
    simulator.start("127.0.0.1", 0, tick_seconds=None)
    try:
        yield simulator
    finally:
        simulator.stop()


def call(
    sim: Simulator,
    method: str,
    path: str,
    body: Any = None,
    *,
    user: str = "",
    groups: tuple[str, ...] = (),
    uid: str = "",
) -> Answer:
    headers = urllib3.HTTPHeaderDict({"Authorization": f"Bearer {TOKEN}"})
    if user:
        headers.add("Impersonate-User", user)
    for group in groups:
        headers.add("Impersonate-Group", group)
    if uid:
        headers.add("Impersonate-Uid", uid)
    if body is not None:
        headers.add("Content-Type", "application/json")
    response = urllib3.request(
        method,
        f"{sim.url}{path}",
        body=json.dumps(body).encode() if body is not None else None,
        headers=headers,
        timeout=5,
        retries=False,
    )
    return Answer(response.status, response.data, response.headers)


def job(name: str = "train", **metadata: Any) -> JsonObject:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, **metadata},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "trainer", "image": "ghcr.io/acme/train:1"}],
                }
            }
        },
    }


def apply(sim: Simulator, resource: Resource, obj: JsonObject) -> JsonObject:
    return sim.store.apply(resource, obj, NOW)


def member_may_submit(sim: Simulator) -> None:
    """What the portal renders for a tenant's members: a Role on jobs, bound to their group."""
    apply(
        sim,
        ROLES,
        {
            "metadata": {"name": "submit", "namespace": "alpha"},
            "rules": [
                {
                    "apiGroups": ["batch"],
                    "resources": ["jobs"],
                    "verbs": ["create", "get", "list", "watch", "delete"],
                },
                {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
            ],
        },
    )
    apply(
        sim,
        ROLE_BINDINGS,
        {
            "metadata": {"name": "members-submit", "namespace": "alpha"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "submit"},
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": MEMBERS}
            ],
        },
    )


# --- create ----------------------------------------------------------------------------------


def test_a_created_job_is_stored_with_its_system_fields(sim: Simulator) -> None:
    sent = job()
    sent["status"] = {"active": 3}
    created = call(sim, "POST", JOBS_PATH, sent)
    assert created.status == 201, created.json
    metadata = created.json["metadata"]
    assert metadata["namespace"] == "alpha"
    assert metadata["uid"] and metadata["resourceVersion"] and metadata["generation"] == 1
    assert metadata["creationTimestamp"].endswith("Z")
    assert "status" not in created.json  # PrepareForCreate drops it
    assert call(sim, "GET", f"{JOBS_PATH}/train").json == created.json

    again = call(sim, "POST", JOBS_PATH, job())
    assert again.status == 409
    assert again.json["reason"] == "AlreadyExists"
    assert again.json["message"] == 'jobs.batch "train" already exists'
    assert again.json["details"] == {"name": "train", "group": "batch", "kind": "jobs"}


def test_generate_name_gives_a_fresh_name(sim: Simulator) -> None:
    first = call(sim, "POST", JOBS_PATH, job("", generateName="train-")).json
    second = call(sim, "POST", JOBS_PATH, job("", generateName="train-")).json
    names = {first["metadata"]["name"], second["metadata"]["name"]}
    assert len(names) == 2
    assert all(n.startswith("train-") and len(n) == len("train-") + 5 for n in names)
    assert {j["metadata"]["name"] for j in sim.store.list(JOBS, "alpha")} == names


def test_bad_bodies_are_refused_in_the_api_servers_words_and_store_nothing(
    sim: Simulator,
) -> None:
    template = job()["spec"]["template"]
    template["spec"] = {"containers": []}
    invalid = call(sim, "POST", JOBS_PATH, {**job(), "spec": {"template": template}})
    assert invalid.status == 422
    assert invalid.json["message"] == (
        'Job.batch "train" is invalid: [spec.template.spec.containers: Required value, '
        'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: '
        '"OnFailure", "Never"]'
    )
    assert [c["field"] for c in invalid.json["details"]["causes"]] == [
        "spec.template.spec.containers",
        "spec.template.spec.restartPolicy",
    ]
    unnamed = call(sim, "POST", JOBS_PATH, job(""))
    assert unnamed.status == 422
    assert (
        "metadata.name: Required value: name or generateName is required"
        in (unnamed.json["message"])
    )
    elsewhere = call(sim, "POST", JOBS_PATH, job(namespace="beta"))
    assert elsewhere.status == 400
    assert elsewhere.json["message"] == (
        "the namespace of the provided object does not match the namespace sent on the request"
    )
    pod = call(sim, "POST", JOBS_PATH, {**job(), "apiVersion": "v1"})
    assert pod.status == 400
    assert pod.json["message"] == (
        "the API version in the data (v1) does not match the expected API version (batch/v1)"
    )
    nowhere = call(sim, "POST", "/apis/batch/v1/namespaces/gamma/jobs", job())
    assert nowhere.status == 404
    assert nowhere.json["message"] == 'namespaces "gamma" not found'
    assert sim.store.list(JOBS) == []


def test_a_dry_run_admits_and_stores_nothing(sim: Simulator) -> None:
    dry = call(sim, "POST", f"{JOBS_PATH}?dryRun=All", job())
    assert dry.status == 201
    assert dry.json["metadata"]["uid"]
    assert "resourceVersion" not in dry.json["metadata"]
    assert sim.store.get(JOBS, "alpha", "train") is None
    wrong = call(sim, "POST", f"{JOBS_PATH}?dryRun=Yes", job())
    assert wrong.status == 400
    assert wrong.json["message"] == 'dryRun: Unsupported value: "Yes": supported values: "All"'


def test_kueues_webhook_down_refuses_every_job_it_would_see_and_stores_nothing(
    sim: Simulator,
) -> None:
    """The API server fails closed (500 InternalError) for a Job with or without a queue and
    for a dry run; namespaces outside Kueue's namespaceSelector are not affected; the fault
    clears through the control API."""
    fault = call(sim, "POST", "/sim/faults", {"kind": "kueue-webhook-down"})
    assert (fault.status, fault.json) == (200, {"kueueWebhook": "down"})
    cause = (
        'failed calling webhook "mjob.kb.io": failed to call webhook: Post '
        '"https://kueue-webhook-service.kueue-system.svc:443/mutate-batch-v1-job?timeout=10s": '
        f"dial tcp {cluster_ip('kueue-system', 'kueue-webhook-service')}:443: connect: "
        "connection refused"
    )
    queued = job("queued", labels={"kueue.x-k8s.io/queue-name": "gpu"})
    for path, body in ((JOBS_PATH, job()), (f"{JOBS_PATH}?dryRun=All", job()), (JOBS_PATH, queued)):
        refused = call(sim, "POST", path, body)
        assert refused.status == 500, refused.json
        assert refused.json["reason"] == "InternalError"
        assert refused.json["message"] == f"Internal error occurred: {cause}"
        assert refused.json["details"] == {"causes": [{"message": cause}]}
    assert sim.store.list(JOBS, "alpha") == []
    sim.cluster.ensure_namespace("kueue-system", NOW)
    outside = call(sim, "POST", "/apis/batch/v1/namespaces/kueue-system/jobs", job())
    assert outside.status == 201, outside.json
    cleared = call(sim, "DELETE", "/sim/faults")
    assert cleared.status == 200
    assert call(sim, "POST", JOBS_PATH, job()).status == 201
    assert sim.store.get(JOBS, "alpha", "train") is not None


def test_kueues_webhook_down_from_python_names_the_jobset_webhook(sim: Simulator) -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "sweep", "namespace": "alpha"},
        "spec": {"replicatedJobs": []},
    }
    sim.set_kueue_webhook_reachable(False)
    with pytest.raises(WebhookUnreachable) as caught:
        sim.create("jobsets", jobset)
    assert caught.value.cause.startswith('failed calling webhook "mjobset.kb.io": ')
    assert "/mutate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s" in caught.value.cause
    assert sim.store.list(JOBSETS, "alpha") == []
    sim.set_kueue_webhook_reachable(True)
    assert sim.create("jobsets", jobset)["metadata"]["uid"]


def test_a_job_meets_the_namespaces_object_count_quota(sim: Simulator) -> None:
    apply(
        sim,
        RESOURCE_QUOTAS,
        {
            "metadata": {"name": "runs", "namespace": "alpha"},
            "spec": {"hard": {"count/jobs.batch": "1"}},
        },
    )
    assert call(sim, "POST", JOBS_PATH, job("one")).status == 201
    refused = call(sim, "POST", f"{JOBS_PATH}?dryRun=All", job("two"))
    assert refused.status == 403
    assert refused.json["message"] == (
        'jobs.batch "two" is forbidden: exceeded quota: runs, requested: count/jobs.batch=1, '
        "used: count/jobs.batch=1, limited: count/jobs.batch=1"
    )


def test_kyverno_sees_the_impersonated_user_and_groups(sim: Simulator) -> None:
    member_may_submit(sim)
    rule = {
        "name": "no-interns",
        "match": {"any": [{"resources": {"kinds": ["Job"]}}]},
        "preconditions": {
            "all": [
                {
                    "key": "tenant:alpha:interns",
                    "operator": "AnyIn",
                    "value": "{{ request.userInfo.groups }}",
                }
            ]
        },
        "validate": {
            "failureAction": "Enforce",
            "message": "{{ request.userInfo.username }} may not submit",
            "deny": {},
        },
    }
    apply(
        sim,
        CLUSTER_POLICIES,
        {"metadata": {"name": "interns"}, "spec": {"rules": [rule]}},
    )
    intern = call(
        sim, "POST", JOBS_PATH, job(), user="bob", groups=(MEMBERS, "tenant:alpha:interns")
    )
    assert intern.status == 403
    assert "bob may not submit" in intern.json["message"]
    assert call(sim, "POST", JOBS_PATH, job(), user=MEMBER, groups=(MEMBERS,)).status == 201


# --- impersonation and RBAC ------------------------------------------------------------------


def test_an_impersonated_create_needs_a_binding(sim: Simulator) -> None:
    member_may_submit(sim)
    refused = call(sim, "POST", JOBS_PATH, job(), user=MEMBER, groups=("tenant:beta:members",))
    assert refused.status == 403
    assert refused.json["reason"] == "Forbidden"
    assert refused.json["message"] == (
        'jobs.batch is forbidden: User "ann@example.com" cannot create resource "jobs" in API '
        'group "batch" in the namespace "alpha"'
    )
    assert sim.store.list(JOBS) == []

    created = call(sim, "POST", JOBS_PATH, job(), user=MEMBER, groups=(MEMBERS,))
    assert created.status == 201
    listed = call(sim, "GET", JOBS_PATH, user=MEMBER, groups=(MEMBERS,))
    assert [j["metadata"]["name"] for j in listed.json["items"]] == ["train"]
    # The binding is alpha's: beta, other verbs and other resources stay closed.
    other = call(sim, "GET", "/apis/batch/v1/namespaces/beta/jobs", user=MEMBER, groups=(MEMBERS,))
    assert other.status == 403
    patch = call(sim, "PATCH", f"{JOBS_PATH}/train", {}, user=MEMBER, groups=(MEMBERS,))
    assert patch.json["message"] == (
        'jobs.batch "train" is forbidden: User "ann@example.com" cannot patch resource "jobs" in '
        'API group "batch" in the namespace "alpha"'
    )
    secrets = call(sim, "GET", "/api/v1/namespaces/alpha/secrets", user=MEMBER, groups=(MEMBERS,))
    assert secrets.status == 403
    # The token without impersonation keeps every right.
    assert call(sim, "GET", "/api/v1/namespaces/alpha/secrets").status == 200


def test_impersonation_headers_as_the_filter_reads_them(sim: Simulator) -> None:
    member_may_submit(sim)
    # Groups without a user: buildImpersonationRequests refuses it.
    alone = call(sim, "GET", JOBS_PATH, groups=(MEMBERS,))
    assert alone.status == 500
    assert b"without impersonating a user" in alone.body
    # Every authenticated user may read discovery (system:discovery), as the uid may be set.
    assert call(sim, "GET", "/apis/batch/v1", user=MEMBER, uid="u-1").status == 200
    assert call(sim, "GET", "/metrics", user=MEMBER).status == 403
    # A service account gets its groups, and a RoleBinding subject without namespace is the
    # binding's own.
    apply(
        sim,
        ROLE_BINDINGS,
        {
            "metadata": {"name": "runner", "namespace": "alpha"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "submit"},
            "subjects": [{"kind": "ServiceAccount", "name": "runner"}],
        },
    )
    runner = "system:serviceaccount:alpha:runner"
    assert call(sim, "GET", JOBS_PATH, user=runner).status == 200
    assert call(sim, "GET", "/apis/batch/v1/namespaces/beta/jobs", user=runner).status == 403


def test_bootstrap_cluster_roles_bind_like_any_other(sim: Simulator) -> None:
    apply(
        sim,
        ROLE_BINDINGS,
        {
            "metadata": {"name": "viewers", "namespace": "beta"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MEMBER}],
        },
    )
    path = "/apis/batch/v1/namespaces/beta/jobs"
    assert call(sim, "GET", path, user=MEMBER).status == 200
    assert call(sim, "POST", path, job(), user=MEMBER).status == 403


# --- delete and the garbage collector --------------------------------------------------------


def owned(owner: JsonObject) -> list[JsonObject]:
    meta = owner["metadata"]
    return [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def job_with_pods(sim: Simulator, name: str = "train") -> JsonObject:
    """A Job as its controller and Kueue leave it: two pods and a Workload it owns."""
    created = call(sim, "POST", JOBS_PATH, job(name)).json
    for _ in range(2):
        sim.cluster.create_pod(
            {
                "metadata": {
                    "namespace": "alpha",
                    "labels": {"job-name": name},
                    "ownerReferences": owned(created),
                },
                "spec": {"containers": [{"name": "trainer", "image": "x"}]},
            },
            name,
            NOW,
            admission=False,
        )
    apply(
        sim,
        WORKLOADS,
        {
            "metadata": {
                "name": f"job-{name}-1a2b3",
                "namespace": "alpha",
                "ownerReferences": owned(created),
            },
            "spec": {"queueName": "default"},
        },
    )
    return created


def names(sim: Simulator, resource: Resource) -> list[str]:
    return [o["metadata"]["name"] for o in sim.store.list(resource, "alpha")]


def test_a_background_delete_takes_the_jobs_pods_and_workload(sim: Simulator) -> None:
    created = job_with_pods(sim)
    assert len(names(sim, PODS)) == 2 and len(names(sim, WORKLOADS)) == 1
    deleted = call(sim, "DELETE", f"{JOBS_PATH}/train?propagationPolicy=Background")
    assert deleted.status == 200
    assert deleted.json["kind"] == "Status" and deleted.json["status"] == "Success"
    assert deleted.json["details"] == {
        "name": "train",
        "group": "batch",
        "kind": "jobs",
        "uid": created["metadata"]["uid"],
    }
    assert "Warning" not in deleted.headers
    assert names(sim, JOBS) == []
    sim.tick()
    assert names(sim, PODS) == [] and names(sim, WORKLOADS) == []


def test_a_job_deleted_without_a_policy_orphans_its_pods_and_warns(sim: Simulator) -> None:
    job_with_pods(sim)
    deleted = call(sim, "DELETE", f"{JOBS_PATH}/train")
    assert deleted.status == 200
    assert deleted.headers["Warning"] == f'299 - "{JOB_DELETE_WARNING}"'
    waiting = deleted.json
    assert waiting["metadata"]["finalizers"] == ["orphan"]
    assert waiting["metadata"]["deletionTimestamp"]
    sim.tick()
    assert names(sim, JOBS) == []
    pods = sim.store.list(PODS, "alpha")
    assert len(pods) == 2 and all("ownerReferences" not in p["metadata"] for p in pods)


def test_a_foreground_delete_removes_the_tree_before_the_owner(sim: Simulator) -> None:
    jobset = apply(
        sim,
        JOBSETS,
        {"metadata": {"name": "llm", "namespace": "alpha"}, "spec": {"replicatedJobs": []}},
    )
    child = call(sim, "POST", JOBS_PATH, job("llm-workers-0", ownerReferences=owned(jobset))).json
    sim.cluster.create_pod(
        {
            "metadata": {"namespace": "alpha", "ownerReferences": owned(child)},
            "spec": {"containers": [{"name": "w", "image": "x"}]},
        },
        "llm-workers-0",
        NOW,
        admission=False,
    )
    path = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/alpha/jobsets/llm"
    dry = call(sim, "DELETE", f"{path}?dryRun=All", {"propagationPolicy": "Foreground"})
    assert dry.json["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert "deletionTimestamp" not in sim.store.get(JOBSETS, "alpha", "llm")["metadata"]
    waiting = call(
        sim, "DELETE", path, {"kind": "DeleteOptions", "propagationPolicy": "Foreground"}
    )
    assert waiting.status == 200
    assert waiting.json["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert names(sim, JOBSETS) == ["llm"]
    sim.tick()
    assert names(sim, JOBSETS) == [] and names(sim, JOBS) == [] and names(sim, PODS) == []
    bad = call(sim, "DELETE", f"{JOBS_PATH}/x?propagationPolicy=Later")
    assert bad.status == 422
    assert 'propagationPolicy: Unsupported value: "Later"' in bad.json["message"]


def test_an_object_with_another_live_owner_only_loses_the_reference(sim: Simulator) -> None:
    first = call(sim, "POST", JOBS_PATH, job("first")).json
    second = call(sim, "POST", JOBS_PATH, job("second")).json
    shared = apply(
        sim,
        WORKLOADS,
        {
            "metadata": {
                "name": "shared",
                "namespace": "alpha",
                "ownerReferences": owned(first) + owned(second),
            }
        },
    )
    assert len(shared["metadata"]["ownerReferences"]) == 2
    call(sim, "DELETE", f"{JOBS_PATH}/first?propagationPolicy=Background")
    sim.tick()
    kept = sim.store.get(WORKLOADS, "alpha", "shared")
    assert kept is not None
    assert [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["second"]


# --- logs ------------------------------------------------------------------------------------


def pod(sim: Simulator, name: str, containers: list[str], status: JsonObject) -> None:
    sim.store.apply(
        PODS,
        {
            "metadata": {"name": name, "namespace": "alpha"},
            "spec": {
                "nodeName": "h200-01" if status else "",
                "containers": [{"name": c, "image": f"img/{c}"} for c in containers],
            },
            "status": status,
        },
        NOW,
    )


def log(sim: Simulator, name: str, query: str = "", **identity: Any) -> Answer:
    return call(sim, "GET", f"/api/v1/namespaces/alpha/pods/{name}/log{query}", **identity)


def test_a_running_pods_log_and_its_tail(sim: Simulator) -> None:
    started = timestamp(NOW - 35)
    pod(
        sim,
        "run",
        ["trainer"],
        {"containerStatuses": [{"name": "trainer", "state": {"running": {"startedAt": started}}}]},
    )
    whole = log(sim, "run")
    assert whole.status == 200
    assert whole.headers["Content-Type"].startswith("text/plain")
    assert whole.body.decode().splitlines() == [
        "[trainer] started: image img/trainer",
        "[trainer] running: 10 s elapsed",
        "[trainer] running: 20 s elapsed",
        "[trainer] running: 30 s elapsed",
    ]
    tail = log(sim, "run", "?tailLines=1&timestamps=true").body.decode()
    assert tail == f"{timestamp(NOW - 5)[:-1]}.000000000Z [trainer] running: 30 s elapsed\n"


def test_a_finished_pod_ends_with_its_exit_code(sim: Simulator) -> None:
    terminated = {
        "exitCode": 1,
        "reason": "Error",
        "startedAt": timestamp(NOW - 100),
        "finishedAt": timestamp(NOW - 85),
    }
    pod(
        sim,
        "done",
        ["trainer", "sidecar"],
        {
            "containerStatuses": [
                {"name": "trainer", "state": {"terminated": terminated}},
                {"name": "sidecar", "state": {"waiting": {"reason": "PodInitializing"}}},
            ]
        },
    )
    lines = log(sim, "done", "?container=trainer").body.decode().splitlines()
    assert lines[-2:] == ["[trainer] running: 10 s elapsed", "[trainer] exited with code 1 (Error)"]
    which = log(sim, "done")
    assert which.status == 400
    assert which.json["message"] == (
        "a container name must be specified for pod done, choose one of: [trainer sidecar]"
    )
    waiting = log(sim, "done", "?container=sidecar")
    assert waiting.status == 400
    assert waiting.json["message"] == (
        'container "sidecar" in pod "done" is waiting to start: PodInitializing'
    )
    assert log(sim, "done", "?container=nope").json["message"] == (
        "container nope is not valid for pod done"
    )


def test_a_pod_without_a_node_has_an_empty_log_and_logs_need_their_own_right(
    sim: Simulator,
) -> None:
    pod(sim, "queued", ["trainer"], {})
    assert log(sim, "queued").body == b""
    assert log(sim, "missing").status == 404
    member_may_submit(sim)
    assert log(sim, "queued", user=MEMBER, groups=(MEMBERS,)).status == 200
    apply(
        sim,
        ROLES,
        {
            "metadata": {"name": "submit", "namespace": "alpha"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    )
    refused = log(sim, "queued", user=MEMBER, groups=(MEMBERS,))
    assert refused.json["message"] == (
        'pods "queued" is forbidden: User "ann@example.com" cannot get resource "pods/log" in '
        'API group "" in the namespace "alpha"'
    )


# --- discovery -------------------------------------------------------------------------------


def test_discovery_lists_the_new_verbs_and_resources(sim: Simulator) -> None:
    batch = {r["name"]: r for r in call(sim, "GET", "/apis/batch/v1").json["resources"]}
    assert batch["jobs"]["verbs"] == ["get", "list", "watch", "patch", "create", "delete"]
    core = {r["name"]: r for r in call(sim, "GET", "/api/v1").json["resources"]}
    assert core["pods/log"]["verbs"] == ["get"]
    groups = {g["name"] for g in call(sim, "GET", "/apis").json["groups"]}
    assert {"rbac.authorization.k8s.io", "scheduling.k8s.io"} <= groups
    rbac = call(sim, "GET", "/apis/rbac.authorization.k8s.io/v1").json["resources"]
    assert {r["name"] for r in rbac} == {
        "roles",
        "rolebindings",
        "clusterroles",
        "clusterrolebindings",
    }
