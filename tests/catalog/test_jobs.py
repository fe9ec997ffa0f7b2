"""Batch jobs before the cluster: what a request may hold (one reader for the form, the API and
the declarative document), who may run, cancel and read, the templates platform admins keep,
and the pages' answers to outsiders and viewers. Submitting to the simulator is
tests/catalog/test_jobs_cluster.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client

from catalog import jobs
from catalog.models import BatchJob, JobTemplate, Resource
from fleet.kube import KubeError
from portal.models import AuditEvent
from tenants.access import Action, may

SHARE = {"name": "train", "flavor": "h200", "kind": "whole", "count": 4}
REQUEST = {
    "name": "ft-1",
    "image": "ghcr.io/ai-factory/trainer:1.0",
    "command": ["python", "train.py"],
    "share": "train",
    "gpus": 2,
    "priority": "training",
}


@pytest.fixture
def alpha(world: dict[str, Any]) -> Any:
    """alpha with an active GPU share (the database stands in for main: nothing merged)."""
    Resource.objects.create(
        tenant=world["alpha"], kind="gpu-share", name="train", state="active", spec=SHARE
    )
    return world["alpha"]


@pytest.fixture
def fine_tuning(world: dict[str, Any]) -> JobTemplate:
    return jobs.do_save_job_template(
        acting_user=world["pam"],
        name="fine-tuning",
        values={
            "purpose": "fine-tuning",
            "image": "ghcr.io/ai-factory/finetune:0.4.0",
            "command": ["python", "-m", "finetune"],
            "args": ["--method", "lora"],
            "gpus": 1,
            "max_runtime_seconds": 7200,
        },
    )


def _refused(tenant: Any, **changes: Any) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        jobs.check_job(tenant, {**REQUEST, **changes})
    return caught.value.message_dict


def test_a_request_reads_strictly() -> None:
    with pytest.raises(ValidationError) as caught:
        jobs.read_job({**REQUEST, "replicas": 2, "gpus": "2", "command": "python train.py"})
    errors = caught.value.message_dict
    assert "Unknown field" in errors["replicas"][0]
    assert errors["gpus"] == ["Must be a whole number."]
    assert errors["command"] == ["Must be a list of strings."]
    with pytest.raises(ValidationError) as caught:
        jobs.read_job({**REQUEST, "env": {"A": 1}})
    assert caught.value.message_dict["env"] == ["Must map variable names to string values."]


def test_a_valid_request_renders_for_the_tenant(alpha: Any) -> None:
    checked = jobs.check_job(alpha, {**REQUEST, "env": {"EPOCHS": "3"}})
    assert checked.kind == "Job"
    assert checked.obj["metadata"]["namespace"] == "alpha"
    assert checked.spec.env == (("EPOCHS", "3"),)
    assert jobs.spec_json(checked.spec)["env"] == {"EPOCHS": "3"}


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"image": "quay.io/someone/miner:1"}, "image", "allowed registry"),
        ({"gpus": 5}, "gpus", "at most 4 whole GPUs"),
        ({"command": ["python", "-c", "a\x07b"]}, "command[2]", "control characters"),
        ({"priority": "inference-critical"}, "priority", "training, batch-low"),
        ({"share": "inference"}, "share", "train"),
        ({"name": "new"}, "name", "names a page"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_kept(
    alpha: Any, changes: dict[str, Any], field: str, words: str
) -> None:
    errors = _refused(alpha, **changes)
    assert any(words in message for message in errors[field]), errors
    assert not BatchJob.objects.exists()
    assert not AuditEvent.objects.filter(action="job.submit").exists()


def test_a_template_fills_what_is_not_given_and_caps_the_deadline(
    alpha: Any, fine_tuning: JobTemplate
) -> None:
    checked = jobs.check_job(alpha, {"name": "ft-2", "template": "fine-tuning", "share": "train"})
    assert checked.spec.image == "ghcr.io/ai-factory/finetune:0.4.0"
    assert checked.spec.command == ("python", "-m", "finetune")
    assert (checked.spec.gpus, checked.spec.deadline_seconds) == (1, 7200)
    assert checked.template == fine_tuning
    errors = _refused(alpha, template="fine-tuning", deadline_seconds=7201)
    assert "between 60 and 7200" in errors["deadline_seconds"][0]
    errors = _refused(alpha, template="no-such")
    assert "fine-tuning" in errors["template"][0]


def test_viewers_and_platform_admins_run_no_jobs(world: dict[str, Any], alpha: Any) -> None:
    assert may(world["bob"], Action.RUN_JOB, alpha)
    assert may(world["alice"], Action.RUN_JOB, alpha)
    for name in ("vic", "pam", "fiona", "charlie"):
        assert not may(world[name], Action.RUN_JOB, alpha), name
        with pytest.raises(PermissionDenied):
            jobs.do_submit_job(alpha, acting_user=world[name], data=REQUEST)
    assert not BatchJob.objects.exists()
    # Only who submitted (still a member) or a tenant admin cancels.
    assert may(world["bob"], Action.CANCEL_JOB, alpha, owners=(world["bob"].pk,))
    assert not may(world["bob"], Action.CANCEL_JOB, alpha, owners=(world["alice"].pk,))
    assert may(world["alice"], Action.CANCEL_JOB, alpha, owners=(world["bob"].pk,))
    # Logs hold the tenant's data: its members read them, viewers too, nobody else.
    assert may(world["vic"], Action.READ_JOB_LOGS, alpha)
    assert not may(world["pam"], Action.READ_JOB_LOGS, alpha)


def test_templates_are_checked_and_audited(world: dict[str, Any], fine_tuning: JobTemplate) -> None:
    event = AuditEvent.objects.get(action="job_template.save")
    assert event.actor == world["pam"]
    assert event.diff["image"] == [None, "ghcr.io/ai-factory/finetune:0.4.0"]
    with pytest.raises(ValidationError) as caught:
        jobs.do_save_job_template(
            acting_user=world["pam"], name="miner", values={**_values(), "image": "evil.io/x:1"}
        )
    assert "allowed registry" in caught.value.message_dict["image"][0]
    with pytest.raises(ValidationError) as caught:
        jobs.do_save_job_template(
            acting_user=world["pam"], name="bad", values={**_values(), "command": ["a\nb"]}
        )
    assert "control characters" in caught.value.message_dict["command"][0]
    with pytest.raises(PermissionDenied):
        jobs.do_save_job_template(acting_user=world["alice"], name="x", values=_values())
    assert set(JobTemplate.objects.values_list("name", flat=True)) == {"fine-tuning"}


def _values() -> dict[str, Any]:
    return {
        "purpose": "evaluation",
        "image": "ghcr.io/ai-factory/eval:1",
        "command": ["lm_eval"],
        "args": [],
        "gpus": 1,
        "max_runtime_seconds": 600,
    }


def test_the_template_page_is_the_platform_admins(
    login: Callable[[str], Client], fine_tuning: JobTemplate
) -> None:
    assert login("alice").get("/job-templates/").status_code == 404
    pam = login("pam")
    page = pam.get("/job-templates/")
    assert page.status_code == 200
    assert "ghcr.io/ai-factory/finetune:0.4.0" in page.content.decode()
    response = pam.post(
        "/job-templates/",
        {
            "name": "evaluation",
            "purpose": "evaluation",
            "image": "ghcr.io/ai-factory/eval:1",
            "command_text": "lm_eval\n--tasks\nmmlu",
            "gpus": 1,
            "max_runtime_seconds": 600,
            "active": "on",
        },
    )
    assert response.status_code == 302
    assert JobTemplate.objects.get(name="evaluation").command == ["lm_eval", "--tasks", "mmlu"]
    assert pam.post("/job-templates/evaluation/delete/").status_code == 302
    assert not JobTemplate.objects.filter(name="evaluation").exists()


def test_the_job_pages_for_members_viewers_and_outsiders(
    login: Callable[[str], Client], alpha: Any, fine_tuning: JobTemplate
) -> None:
    for outsider in ("charlie", "nora"):
        for url in ("/t/alpha/jobs/", "/t/alpha/jobs/new/", "/t/alpha/jobs/ft-1/"):
            assert login(outsider).get(url).status_code == 404, (outsider, url)
    bob = login("bob")
    listing = bob.get("/t/alpha/jobs/")
    assert listing.status_code == 200
    assert "Run a job" in listing.content.decode()
    form = bob.get("/t/alpha/jobs/new/?template=fine-tuning").content.decode()
    assert "ghcr.io/ai-factory/finetune:0.4.0" in form
    assert "training, batch-low" in form or "training" in form
    viewer = login("vic")
    assert "Run a job" not in viewer.get("/t/alpha/jobs/").content.decode()
    assert "viewers cannot" in viewer.get("/t/alpha/jobs/new/").content.decode()
    assert viewer.post("/t/alpha/jobs/new/", {**REQUEST, "command": ""}).status_code == 403
    assert bob.get("/t/alpha/jobs/nope/").status_code == 404


def test_the_form_shows_the_checks_sentences_on_their_fields(
    login: Callable[[str], Client], alpha: Any
) -> None:
    response = login("bob").post(
        "/t/alpha/jobs/new/",
        {
            "name": "ft-1",
            "image": "docker.io/library/python:3.12",
            "command": "python\ntrain.py",
            "share": "train",
            "gpus": 9,
            "nodes": 1,
            "priority": "training",
            "ttl_seconds": 60,
            "cpu": 4,
            "memory_gib": 8,
        },
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert "allowed registry" in form.errors["image"][0]
    assert not BatchJob.objects.exists()


def test_a_pending_jobs_position_counts_from_one_as_people_do() -> None:
    from fleet.models import QueueWorkload

    job = BatchJob(name="ft", namespace="alpha", kind="Job", uid="u1")
    waiting = QueueWorkload(
        state=QueueWorkload.State.PENDING,
        reason="Pending",
        message="couldn't assign flavors to pod set main",
        position_in_local_queue=0,
    )
    state = jobs.state_from(job, waiting)
    assert (state.state, state.position) == ("pending", 1)
    assert "couldn't assign flavors" in state.detail
    waiting.position_in_local_queue = None  # the visibility API not read yet
    assert jobs.state_from(job, waiting).position is None
    admitted = QueueWorkload(state=QueueWorkload.State.ADMITTED, position_in_local_queue=3)
    assert jobs.state_from(job, admitted).position is None


@pytest.mark.parametrize(
    ("webhook", "service", "kueues"),
    [
        ("vjob.kb.io", "kueue-webhook-service.kueue-system.svc", True),
        ("mjobset.kb.io", "kueue-webhook-service.kueue-system.svc", True),
        # JobSet's own controller names its webhooks as Kueue does; its Service tells them apart.
        ("mjobset.kb.io", "jobset-webhook-service.jobset-system.svc", False),
        ("validate.kyverno.svc-fail", "kyverno-svc.kyverno.svc", False),
    ],
)
def test_only_kueues_unanswered_webhook_is_called_kueue(
    webhook: str, service: str, kueues: bool
) -> None:
    cause = (
        f'failed calling webhook "{webhook}": failed to call webhook: Post '
        f'"https://{service}:443/x?timeout=10s": dial tcp 10.96.0.9:443: connect: connection '
        "refused"
    )
    error = KubeError(
        f"Could not create Job in alpha: HTTP 500 - Internal error occurred: {cause}.", 500
    )
    message = jobs._cluster_refusal(error, "run Job ft-1").messages[0]
    if kueues:
        assert message == (
            f"Kueue's admission webhook is not answering: the API server {cause}. Nothing was "
            "submitted; try again when Kueue is back."
        )
    else:
        assert message.startswith("The cluster could not run Job ft-1 (Could not create Job")
        assert message.endswith("Nothing was changed; try again when it answers.")
