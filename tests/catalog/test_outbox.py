"""Mail goes through an outbox: written with the decision, sent after commit by one job that
sends everything unsent over one connection, and queued only when no such job waits."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import mail
from django.db import transaction

from catalog import services, tasks
from catalog.models import OutgoingMail
from portal import jobs
from portal.jobs import run_job
from portal.models import Job
from tests.support import wait_until

# Mail claimed with select_for_update(skip_locked=True), committed one by one.
pytestmark = [pytest.mark.django_db, pytest.mark.db_engine]


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Jobs are queued but not handed to a runner (their ids are kept): run by hand."""
    ids: list[int] = []
    monkeypatch.setattr(jobs, "dispatch", lambda job_id, *a, **k: ids.append(job_id))
    return ids


def _tell(world: dict[str, Any], title: str) -> None:
    services.notify(
        [world["alice"], world["bob"]], tenant=world["alpha"], title=title, body="b", url="/x"
    )


def test_a_burst_of_notices_is_one_job_and_every_mail(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any, held: list[int]
) -> None:
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        for n in range(30):
            _tell(world, f"notice {n}")
    # 30 notices, each one mail to two people: one waiting job, 30 mails in the outbox.
    assert OutgoingMail.objects.filter(sent_at__isnull=True).count() == 30
    [job] = Job.objects.filter(task="catalog.send_outbox")
    assert job.status == Job.Status.QUEUED and held == [job.pk]
    with django_capture_on_commit_callbacks(execute=True):
        _tell(world, "one more")  # a job is waiting already: no second one
    assert Job.objects.filter(task="catalog.send_outbox").count() == 1

    run_job(job.pk)
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.log
    assert [m.subject for m in mail.outbox] == [f"[alpha] notice {n}" for n in range(30)] + [
        "[alpha] one more"
    ]
    assert all(sorted(m.to) == ["alice@example.com", "bob@example.com"] for m in mail.outbox)
    assert not OutgoingMail.objects.filter(sent_at__isnull=True).exists()


def test_a_failed_send_leaves_the_mail_to_send_again(
    world: dict[str, Any], django_capture_on_commit_callbacks: Any, held: list[int], settings: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        _tell(world, "hello")
    job = Job.objects.get(task="catalog.send_outbox")
    settings.EMAIL_BACKEND = "tests.catalog.test_outbox.Refusing"
    with pytest.raises(ConnectionRefusedError):
        tasks.send_outbox.job_function(job)
    assert OutgoingMail.objects.get().sent_at is None
    assert mail.outbox == []
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    tasks.send_outbox.job_function(job)
    assert [m.subject for m in mail.outbox] == ["[alpha] hello"]
    assert OutgoingMail.objects.get().sent_at is not None


def test_an_inactive_person_or_one_without_an_address_gets_no_mail(
    world: dict[str, Any], run_jobs: Any
) -> None:
    world["bob"].is_active = False
    world["bob"].save()
    world["alice"].email = ""
    world["alice"].save()
    run_jobs(_tell, world, "quiet")
    assert not OutgoingMail.objects.exists()
    assert mail.outbox == []


class Refusing:
    """A mail backend whose server refuses the connection."""

    def __init__(self, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> Refusing:
        raise ConnectionRefusedError("the mail server refused the connection")

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.mark.django_db(transaction=True)
def test_the_job_waits_so_that_separate_decisions_share_it(
    world: dict[str, Any], settings: Any
) -> None:
    """With the embedded runner: each notice commits on its own (as a burst of approvals does),
    the job waits CATALOG_OUTBOX_DELAY_SECONDS, queued, and sends them all in one go. Without
    the wait the runner would send each before the next arrived: a job per mail."""
    import time

    settings.PORTAL_TASK_RUNNER = "thread"
    settings.CATALOG_OUTBOX_DELAY_SECONDS = 1
    started = time.monotonic()
    for n in range(3):
        with transaction.atomic():
            _tell(world, f"notice {n}")
    assert time.monotonic() - started < 1, "the notices took longer than the job's wait"
    [job] = Job.objects.filter(task="catalog.send_outbox")
    assert job.status == Job.Status.QUEUED and mail.outbox == []
    wait_until(
        lambda: Job.objects.filter(pk=job.pk, status=Job.Status.SUCCEEDED).exists(),
        30,
        "the outbox job to send",
        details=lambda: Job.objects.get(pk=job.pk).log,
    )
    assert sorted(m.subject for m in mail.outbox) == [f"[alpha] notice {n}" for n in range(3)]
    assert Job.objects.filter(task="catalog.send_outbox").count() == 1
