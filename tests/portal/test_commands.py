from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from portal.models import AuditEvent
from tenants.models import Membership, PlatformRole, Tenant


def test_it_seeds_the_demo_idempotently(transactional_db: None) -> None:
    # transactional: the seed's commits run the checks that let it merge, as in `make demo`
    call_command("seed_demo", stdout=StringIO())
    from catalog.models import Resource, ResourceRequest

    active = set(Resource.objects.filter(state="active").values_list("tenant__slug", "name"))
    assert active == {
        ("vision", "serve"),
        ("vision", "eval"),
        ("vision", "claims"),
        ("vision", "train"),
        ("vision", "eval-large"),
        ("vision", "lab"),
        ("vision", "caption"),
        ("llm-platform", "serve"),
        ("llm-platform", "small"),
    }
    waiting = ResourceRequest.objects.get(state="submitted")
    assert (waiting.tenant.slug, waiting.resource.name) == ("llm-platform", "frac")
    from catalog.models import JobTemplate

    templates = dict(JobTemplate.objects.values_list("name", "purpose"))
    assert templates == {
        "fine-tuning": "fine-tuning",
        "evaluation": "evaluation",
        "batch-inference": "batch-inference",
    }
    # Every change the seed opened ran the duplicates check, and main has no duplicate.
    from gitops import services as gitops
    from gitops.checks.duplicates import check_duplicates
    from gitops.models import CheckRun

    runs = CheckRun.objects.filter(name="duplicates")
    assert runs.exists() and set(runs.values_list("status", flat=True)) == {"passed"}
    repo = gitops.repository()
    main = repo.head("main")
    assert main is not None
    assert check_duplicates(repo.read_tree(main)) == []
    # The Flux controllers the demo's cluster runs are in Git, through a reviewed change, and
    # the flux-system build gives them the lockdown's flags.
    from gitops.models import ChangeRequest
    from simulator.flux_install import ControllerFlags, controller_flags, export
    from simulator.kustomize import Workspace

    flux_system = "clusters/ai-factory/flux-system"
    (components,) = ChangeRequest.objects.filter(title__startswith="Commit the Flux controllers")
    assert (components.status, components.author.username) == ("merged", "platform")
    assert [r.reviewer.username for r in components.reviews.all()] == ["ops"]
    assert repo.read_file(main, f"{flux_system}/gotk-components.yaml") == export()
    with Workspace() as workspace:
        built = workspace.build(main, repo.read_tree(main), flux_system, {})
    assert built.ok, built.message
    assert controller_flags(built.objects, "kustomize-controller") == ControllerFlags(
        no_cross_namespace_refs=True, default_service_account="default", no_remote_bases=True
    )
    assert controller_flags(built.objects, "helm-controller") == ControllerFlags(
        no_cross_namespace_refs=True, default_service_account="default"
    )
    # A month of made-up GPU usage for the cost pages (tests/billing/test_demo_history.py).
    from billing.models import Budget, GpuPrice, UsageHour

    history = UsageHour.objects.filter(source="demo").count()
    # four placements of the simulator's seed workloads and caption's predictor
    assert history == 30 * 24 * 5
    counts = (
        Tenant.objects.count(),
        Membership.objects.count(),
        AuditEvent.objects.count(),
        GpuPrice.objects.count(),
        Budget.objects.count(),
    )
    call_command("seed_demo", stdout=StringIO())
    assert counts == (
        Tenant.objects.count(),
        Membership.objects.count(),
        AuditEvent.objects.count(),
        GpuPrice.objects.count(),
        Budget.objects.count(),
    )
    assert UsageHour.objects.filter(source="demo").count() == history
    assert (
        ChangeRequest.objects.filter(title__startswith="Commit the Flux controllers").count() == 1
    )
    assert repo.head("main") == main
    assert set(Tenant.objects.values_list("slug", flat=True)) == {
        "vision",
        "llm-platform",
        "bank-risk",
    }
    assert Tenant.objects.get(slug="bank-risk").trust_level == "dedicated"
    # Raised for vision's training share, through the platform admin's quota setting.
    assert Tenant.objects.get(slug="vision").gpu_quota == 24
    # Its two H200 nodes of its own, reserved through a merged change (and only once).
    from fleet.models import NodeReservation
    from gitops.services import reservations_on_main

    held = {node: owner for node, (owner, _) in reservations_on_main().items()}
    assert held == {"h200-05": "bank-risk", "h200-06": "bank-risk"}
    assert NodeReservation.objects.filter(tenant_slug="bank-risk").count() == 2
    # Accepted at the merge (the demo's first fleet sync follows main), then billed at the
    # demo's reservation price: the lines bank-risk's invoices page shows for the month so
    # far (an hour on, so that they are not empty).
    from datetime import timedelta

    from django.utils import timezone

    from billing import invoicing
    from billing.demo import RESERVATION_PRICE
    from fleet import reservations

    reservations.follow()

    start = invoicing.month_bounds(invoicing.today_utc())[0]
    soon = timezone.now() + timedelta(hours=1)
    lines = invoicing.reservation_lines(Tenant.objects.get(slug="bank-risk"), start, soon, soon)
    assert sorted((line.description.split(":")[0], line.unit_price) for line in lines.lines) == [
        ("Reserved node h200-05", RESERVATION_PRICE),
        ("Reserved node h200-06", RESERVATION_PRICE),
    ]
    assert PlatformRole.objects.get(user__username="platform").role == "platform-admin"
    assert PlatformRole.objects.get(user__username="finance").role == "finance"
    assert Membership.objects.get(user__username="alice").role == "admin"


def test_it_grants_platform_roles_from_the_shell(world: dict[str, Any]) -> None:
    call_command("grant_platform_role", "nora", "platform-admin", stdout=StringIO())
    assert PlatformRole.objects.filter(user=world["nora"], role="platform-admin").exists()
    assert AuditEvent.objects.filter(action="platform_role.create").count() == 1
    with pytest.raises(CommandError, match="No user 'ghost'"):
        call_command("grant_platform_role", "ghost", "finance", stdout=StringIO())
    with pytest.raises(CommandError):
        call_command("grant_platform_role", "nora", "root", stdout=StringIO())
