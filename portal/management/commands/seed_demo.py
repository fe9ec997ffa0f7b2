"""Create the demo's users and tenants (idempotent: running it twice changes nothing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml
from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand
from django.db import transaction
from django.test import override_settings

from billing.demo import PlannedWorkload
from gitops import services as gitops
from gitops.models import ChangeRequest
from tenants import services
from tenants.models import Membership, PlatformRole, Role, Tenant
from tenants.quota import do_set_gpu_quota

if TYPE_CHECKING:
    from simulator.config import SimConfig


def _simulator_config() -> SimConfig:
    """The configuration of the simulator ``make demo`` starts (FLEET_SIMULATOR_CONFIG, else
    the demo fleet's)."""
    from simulator.config import SimConfig, load_config

    return (
        load_config(settings.FLEET_SIMULATOR_CONFIG)
        if settings.FLEET_SIMULATOR_CONFIG
        else SimConfig.demo()
    )


def planned_workloads() -> list[PlannedWorkload]:
    """The seed workloads of the simulator ``make demo`` starts (FLEET_SIMULATOR_CONFIG, else
    the demo fleet's), for the billing history of a fleet not synced yet."""
    config = _simulator_config()
    planned = []
    for seed in config.seed_workloads:
        group = config.pool(seed.pool)
        if group is None or not group.gpus_per_node:
            continue
        planned.append(
            PlannedWorkload(
                namespace=seed.namespace,
                kind=seed.kind,
                name=seed.name,
                pods=seed.pods,
                pool=group.pool,
                product=group.product,
                mode=group.mode,
                gpu_memory_mib=group.gpu_memory_mib,
                requests={r: int(v) for r, v in seed.resources if r.startswith("nvidia.com/")},
            )
        )
    return planned


def planned_endpoints() -> list[PlannedWorkload]:
    """The predictors of the endpoints main holds awake, as the demo's cluster will run them:
    their InferenceServices as main has them, their ReplicaSets named as the simulator's
    KServe names them (``simulator.kserve.predictor_replica_set``), so the history's rows
    carry the workload names the ingest will give their pods, ``minReplicas`` pods each on
    the pool of their share's flavor."""
    from gitops.fleet import POOL_LABEL, configured_fleet
    from simulator.kserve import predictor_replica_set

    config = _simulator_config()
    fleet = configured_fleet()
    main = gitops.main_sha()
    if main is None:
        return []
    repo = gitops.repository()
    planned = []
    for slug in Tenant.objects.order_by("slug").values_list("slug", flat=True):
        tenant = gitops.tenant_spec_on_main(slug)
        if tenant is None or not tenant.endpoints:
            continue
        services_of = {
            doc["metadata"]["name"]: doc
            for text in repo.read_tree(main, f"tenants/{slug}/").values()
            for doc in yaml.safe_load_all(text)
            if isinstance(doc, dict) and doc.get("kind") == "InferenceService"
        }
        for endpoint in tenant.endpoints:
            share = tenant.share(endpoint.share)
            flavor = fleet.flavor(share.flavor) if share else None
            group = config.pool(dict(flavor.node_labels).get(POOL_LABEL, "")) if flavor else None
            service = services_of.get(endpoint.name)
            if endpoint.asleep or group is None or service is None:
                continue
            predictor = service["spec"]["predictor"]
            limits = predictor.get("model", {}).get("resources", {}).get("limits", {})
            replica_set, _ = predictor_replica_set(endpoint.name, predictor)
            planned.append(
                PlannedWorkload(
                    namespace=slug,
                    kind="ReplicaSet",
                    name=replica_set,
                    pods=int(predictor.get("minReplicas", 1)),
                    pool=group.pool,
                    product=group.product,
                    mode=group.mode,
                    gpu_memory_mib=group.gpu_memory_mib,
                    requests={r: int(v) for r, v in limits.items() if r.startswith("nvidia.com/")},
                )
            )
    return planned


DEMO_PASSWORD = "demo-password-1"  # printed in the README; the demo only listens on 127.0.0.1

USERS = [
    # username, full name, platform role
    ("platform", "Pat Platform", PlatformRole.Name.PLATFORM_ADMIN),
    ("ops", "Olga Ops", PlatformRole.Name.PLATFORM_ADMIN),
    ("finance", "Fin Ance", PlatformRole.Name.FINANCE),
    ("alice", "Alice Admin", None),
    ("bob", "Bob Builder", None),
    ("carol", "Carol Chen", None),
    ("dave", "Dave Data", None),
    ("erin", "Erin Eval", None),
    ("frank", "Frank Viewer", None),
]

MERGED_ONBOARDINGS = ("vision", "llm-platform", "bank-risk")
# GPU quotas above the default of 16, set by a platform admin: vision's shares add up to 21
# GPUs (its training share among them).
GPU_QUOTAS = {"vision": 24}
# The dedicated tenant's own nodes (issue 29): whole H200 nodes, away from the node the first
# sync sends to burn-in (demo_jobs.DEMO_BURN_IN_NODE) and from where the seed's jobs run.
DEMO_RESERVATIONS = {"bank-risk": ("h200-05", "h200-06")}

# Catalog requests: (tenant, requester, kind, spec, merged?). Merged ones become resources the
# simulated cluster runs; the last waits in the approval queue.
CATALOG = [
    (
        "vision",
        "alice",
        "gpu-share",
        {"name": "serve", "flavor": "h200", "kind": "whole", "count": 2},
        True,
    ),
    (
        "vision",
        "bob",
        "endpoint",
        {
            "name": "caption",
            "model_uri": "hf://Salesforce/blip-image-captioning-large",
            "share": "serve",
            "gpus_per_replica": 1,
            "max_replicas": 2,
        },
        True,
    ),
    (
        "vision",
        "alice",
        "gpu-share",
        {
            "name": "eval",
            "flavor": "h200-mig",
            "kind": "mig",
            "count": 4,
            "mig_profile": "1g.18gb",
        },
        True,
    ),
    (
        "vision",
        "alice",
        "gpu-share",
        {"name": "claims", "flavor": "h200-dra", "kind": "dra", "count": 2},
        True,
    ),
    # What the simulator's seed workloads were admitted on (SimConfig.demo): vision's 16-GPU
    # training run (two H200 nodes; 19 whole GPUs granted of the 48 no reservation holds) and
    # its large evaluation on a 3g.71gb slice. The serving share stays 2, so a portal job
    # asking for both its GPUs waits behind quota.
    (
        "vision",
        "alice",
        "gpu-share",
        {"name": "train", "flavor": "h200", "kind": "whole", "count": 16},
        True,
    ),
    (
        "vision",
        "alice",
        "gpu-share",
        {
            "name": "eval-large",
            "flavor": "h200-mig",
            "kind": "mig",
            "count": 1,
            "mig_profile": "3g.71gb",
        },
        True,
    ),
    (
        "vision",
        "alice",
        "cluster",
        {"name": "lab", "node_pools": ["h200"], "cpu_quota": 16, "memory_gib": 64},
        True,
    ),
    # llm-platform holds whole GPUs and HAMi slots: a queue mixing topology-aware and other
    # flavors (gitops.render.kueue).
    (
        "llm-platform",
        "carol",
        "gpu-share",
        {"name": "serve", "flavor": "h200", "kind": "whole", "count": 1},
        True,
    ),
    (
        "llm-platform",
        "carol",
        "gpu-share",
        {
            "name": "small",
            "flavor": "h200-hami",
            "kind": "hami",
            "count": 2,
            # A tenth of an H200 per slot, as the GPU quota counts a slot of a flavor split in
            # ten (gitops.render.resources.gpu_equivalents) and the ledger meters the larger of
            # its memory and cores: what chat-small's predictor runs on (SimConfig.demo).
            "gpumem_mib": 14000,
            "gpucores_percent": 10,
        },
        True,
    ),
    (
        "llm-platform",
        "dave",
        "gpu-share",
        {
            "name": "frac",
            "flavor": "h200-hami",
            "kind": "hami",
            "count": 4,
            "gpumem_mib": 24000,
            "gpucores_percent": 25,
        },
        False,
    ),
]

TENANTS = [
    # slug, name, trust, cost centre, {username: role}
    ("vision", "Vision Research", "shared", "CC-1001", {"alice": Role.ADMIN, "bob": Role.MEMBER}),
    (
        "llm-platform",
        "LLM Platform",
        "shared",
        "CC-2002",
        {"carol": Role.ADMIN, "dave": Role.MEMBER, "frank": Role.VIEWER},
    ),
    ("bank-risk", "Bank Risk (external)", "dedicated", "CC-9009", {"erin": Role.ADMIN}),
]


# name, fields: the demo's batch job templates (images from the fleet's allowed registries).
JOB_TEMPLATES: list[tuple[str, dict[str, Any]]] = [
    (
        "fine-tuning",
        {
            "purpose": "fine-tuning",
            "description": "LoRA fine-tuning of a Hugging Face model on a dataset.",
            "image": "ghcr.io/ai-factory/finetune:0.4.0",
            "command": ["python", "-m", "ai_factory.finetune"],
            "args": ["--method", "lora"],
            "gpus": 2,
            "max_runtime_seconds": 24 * 3600,
        },
    ),
    (
        "evaluation",
        {
            "purpose": "evaluation",
            "description": "lm-evaluation-harness tasks against a model.",
            "image": "ghcr.io/ai-factory/eval:0.4.0",
            "command": ["lm_eval"],
            "args": ["--tasks", "mmlu,hellaswag"],
            "gpus": 1,
            "max_runtime_seconds": 4 * 3600,
        },
    ),
    (
        "batch-inference",
        {
            "purpose": "batch-inference",
            "description": "vLLM's offline batch runner over a JSONL file of requests.",
            "image": "docker.io/vllm/vllm-openai:v0.11.0",
            "command": ["python", "-m", "vllm.entrypoints.openai.run_batch"],
            "args": ["-i", "/data/requests.jsonl", "-o", "/data/results.jsonl"],
            "gpus": 1,
            "max_runtime_seconds": 8 * 3600,
        },
    ),
]


class Command(BaseCommand):
    help = "Create the demo users and tenants."

    def handle(self, *args: Any, **options: Any) -> None:
        # Checks run in this thread so the demo's first changes can be reviewed at once.
        with override_settings(PORTAL_TASK_RUNNER="eager"):
            self._seed()
            self._merge_onboarding()
            self._reserve_nodes()
            self._commit_flux_components()
            self._seed_catalog()
            self._seed_job_templates()
            self._seed_billing()
            self._seed_lifecycle()
            self.stdout.write(
                self.style.SUCCESS(
                    f"Demo ready: {len(USERS)} users (password {DEMO_PASSWORD!r}), "
                    f"{len(TENANTS)} tenants."
                )
            )

    @transaction.atomic
    def _seed(self) -> None:
        User = get_user_model()
        users = {}
        for username, full_name, platform_role in USERS:
            first, last = full_name.split(" ", 1)
            user, created = User.objects.get_or_create(
                username=username,
                defaults={
                    "email": f"{username}@example.com",
                    "first_name": first,
                    "last_name": last,
                },
            )
            if created:
                user.set_password(DEMO_PASSWORD)
                user.save()
                # The demo's people confirmed their addresses (a real deployment learns it from
                # the identity provider or the confirmation mail).
                EmailAddress.objects.create(
                    user=user, email=user.email, verified=True, primary=True
                )
            users[username] = user
            if platform_role:
                services.do_grant_platform_role(user, acting_user=None, role=platform_role)
        platform = users["platform"]
        for slug, name, trust, cost_centre, members in TENANTS:
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is None:
                tenant = services.do_create_tenant(
                    acting_user=platform,
                    slug=slug,
                    display_name=name,
                    trust_level=trust,
                    cost_centre=cost_centre,
                    contacts=[f"{slug}-team@example.com"],
                )
            if slug in GPU_QUOTAS:
                do_set_gpu_quota(tenant, acting_user=platform, quota=GPU_QUOTAS[slug])
            for username, role in members.items():
                if not Membership.objects.filter(tenant=tenant, user=users[username]).exists():
                    services.do_add_member(
                        tenant, acting_user=platform, user=users[username], role=role
                    )

    def _merge_onboarding(self) -> None:
        """A second platform admin reviews and merges the first two onboardings; the third
        stays open so the demo has a pull request to review."""
        ops = get_user_model().objects.get(username="ops")
        for slug in MERGED_ONBOARDINGS:
            for change in ChangeRequest.objects.filter(tenant_slug=slug, status="open"):
                # Skipped checks (no kubectl here) do not block a merge, as in the portal.
                if change.checks_state not in (
                    ChangeRequest.Checks.PASSED,
                    ChangeRequest.Checks.PARTIAL,
                ):
                    continue
                with transaction.atomic():
                    gitops.do_review(change, acting_user=ops, state="approve", body="Looks right.")
                with transaction.atomic():
                    gitops.do_merge(change, acting_user=ops)

    def _reserve_nodes(self) -> None:
        """bank-risk's two H200 nodes, through the change flow: the platform admin asks, a
        second one approves and merges. Nothing to do once main holds them. The nodes' facts
        come from the simulator's configuration: no sync has read the fleet yet."""
        from fleet import reservations
        from gitops.services import reservations_on_main

        users = {u.username: u for u in get_user_model().objects.all()}
        on_main = {owner for owner, _ in reservations_on_main().values()}
        facts = demo_node_facts()
        for slug, nodes in DEMO_RESERVATIONS.items():
            if slug in on_main:
                continue
            try:
                with transaction.atomic():
                    change = reservations.do_reserve_nodes(
                        slug, nodes, acting_user=users["platform"], inventory=facts
                    )
            except ValidationError as exc:
                self.stderr.write(f"demo reservation for {slug} skipped: {exc.messages}")
                continue
            change.refresh_from_db()
            if change.checks_state not in ("passed", "partial"):
                self.stderr.write(f"demo reservation {change} did not pass its checks")
                continue
            with transaction.atomic():
                gitops.do_review(change, acting_user=users["ops"], state="approve", body="Ok.")
            with transaction.atomic():
                gitops.do_merge(change, acting_user=users["ops"])

    def _commit_flux_components(self) -> None:
        """The controllers of the Flux the demo's cluster runs (the simulator's ``flux install
        --export``), committed as an operator does (``add_flux_components``): a platform admin
        opens the change, a second one approves and merges it, and Flux applies the
        multi-tenancy lockdown. Nothing to do once main holds them; a real cluster's operator
        commits its own."""
        if not settings.FLEET_SIMULATOR:
            return
        from gitops.fleet import configured_fleet
        from simulator.flux_install import export

        fleet, components = configured_fleet(), export()
        users = get_user_model().objects
        change = ChangeRequest.objects.filter(
            status=ChangeRequest.Status.OPEN, title=gitops.flux_components_title(fleet)
        ).first()
        if change is None:
            if not gitops.flux_components_changes(fleet, components):
                return
            with transaction.atomic():
                change = gitops.open_flux_components_change(
                    fleet, components, acting_user=users.get(username="platform")
                )
            change.refresh_from_db()
        if change.checks_state not in (ChangeRequest.Checks.PASSED, ChangeRequest.Checks.PARTIAL):
            self.stderr.write(f"the Flux controllers' change {change.pk} did not pass its checks")
            return
        ops = users.get(username="ops")
        with transaction.atomic():
            gitops.do_review(change, acting_user=ops, state="approve", body="The demo's Flux.")
        with transaction.atomic():
            gitops.do_merge(change, acting_user=ops)

    def _seed_catalog(self) -> None:
        """Requests through the real workflow: asked by a member, approved and merged by a
        platform admin; the last one stays waiting for a decision."""
        from catalog import services as catalog
        from catalog.models import Resource

        users = {u.username: u for u in get_user_model().objects.all()}
        for slug, requester, kind, spec, merge in CATALOG:
            tenant = Tenant.objects.get(slug=slug)
            if Resource.objects.filter(tenant=tenant, kind=kind, name=spec["name"]).exists():
                continue
            try:
                with transaction.atomic():
                    request = catalog.do_create_request(
                        tenant,
                        acting_user=users[requester],
                        kind=kind,
                        spec=spec,
                        reason="Seeded for the demo.",
                    )
            except ValidationError as exc:  # e.g. its GPU share did not merge
                self.stderr.write(f"demo request {slug}/{spec['name']} skipped: {exc.messages}")
                continue
            if not merge:
                continue
            request = catalog.do_approve(request, acting_user=users["platform"])
            if request.change is None or request.change.checks_state not in ("passed", "partial"):
                self.stderr.write(f"demo request {request} did not get a passing pull request")
                continue
            with transaction.atomic():
                gitops.do_merge(request.change, acting_user=users["platform"])
            catalog.advance_requests()

    def _seed_job_templates(self) -> None:
        """The platform's three batch job templates, as a platform admin saves them."""
        from catalog.jobs import do_save_job_template
        from catalog.models import JobTemplate

        platform = get_user_model().objects.get(username="platform")
        for name, values in JOB_TEMPLATES:
            if not JobTemplate.objects.filter(name=name).exists():
                do_save_job_template(acting_user=platform, name=name, values=values)

    def _seed_billing(self) -> None:
        """Prices, a month of made-up GPU usage and a budget, so the cost pages have a
        history before the demo's own exporter has been scraped for an hour."""
        from billing.dashboards import granted
        from billing.demo import seed_history, seed_idle

        # Within the shares on main: the quota chart then never shows more held than granted.
        seeded = seed_history(planned=planned_workloads() + planned_endpoints(), grants=granted())
        self.stdout.write(
            f"Demo billing: {seeded.rows} usage rows over the last 30 days "
            f"({seeded.skipped_hours} hours already metered), {seeded.prices} new prices, "
            f"a budget for {seeded.budget or 'no tenant'}."
        )
        cases = seed_idle()
        self.stdout.write(f"Demo idle reclaim: idle policies, {cases} idle case(s) opened.")

    def _seed_lifecycle(self) -> None:
        """Every node of the demo fleet known and ready but ``DEMO_BURN_IN_NODE``: the first
        sync then sees it as new, cordons it and sends it to burn-in (``fleet.burnin``), and
        ``serve --demo-jobs`` lets its tests pass (``demo_jobs.run_demo_burn_in``)."""
        from fleet.models import NodeLifecycle
        from portal.management.demo_jobs import DEMO_BURN_IN_NODE

        if NodeLifecycle.objects.exists():
            return
        names = [name for name in demo_node_names() if name != DEMO_BURN_IN_NODE]
        NodeLifecycle.objects.bulk_create(
            NodeLifecycle(node_name=name, state=NodeLifecycle.State.READY, reason="demo fleet")
            for name in names
        )


def demo_node_facts() -> dict[str, Any]:
    """The GPU nodes of the simulator ``make demo`` starts, as a reservation needs them."""
    from fleet.reservations import NodeFacts

    return {
        f"{group.pool}-{number:02d}": NodeFacts(group.pool, group.gpus_per_node, group.product)
        for group in _demo_config().node_groups
        if group.gpus_per_node
        for number in range(1, group.nodes + 1)
    }


def _demo_config() -> Any:
    from simulator.config import SimConfig, load_config

    return (
        load_config(settings.FLEET_SIMULATOR_CONFIG)
        if settings.FLEET_SIMULATOR_CONFIG
        else SimConfig.demo()
    )


def demo_node_names() -> list[str]:
    """The node names of the simulator ``make demo`` starts (``<pool>-<NN>``)."""
    config = _simulator_config()
    return [
        f"{group.pool}-{number:02d}"
        for group in config.node_groups
        for number in range(1, group.nodes + 1)
    ]
