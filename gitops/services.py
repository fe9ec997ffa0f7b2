"""Change requests: open, check, review, merge, close. The only writers of gitops models.

Every ``do_*`` is atomic with its audit row; the Git write happens inside the same database
transaction and last, so a failed Git write rolls the row back (nothing half-written) and a
row is committed only once its commit exists. Slow work (checks, pushing, nudging Flux) runs
as jobs after commit.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, TypeVar

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from gitops.checks.cluster_access import is_access_file, narrows_only
from gitops.checks.scope import ANY_TENANT, EVERYTHING
from gitops.fleet import base_fleet, configured_fleet, flavor_mapping, with_inventory
from gitops.forges import WebhookEvent
from gitops.models import (
    ChangeRequest,
    FleetInventory,
    ForgeDelivery,
    MergeQueueEntry,
    Review,
)
from gitops.render import (
    render_cluster_bootstrap,
    render_infrastructure,
    render_tenant_tree,
    render_tenants_index,
    specfiles,
)
from gitops.render.cluster_access import ACCESS_DIR
from gitops.render.portal import PORTAL_FLUX_FILE, render_portal_component
from gitops.render.tree import cluster_kustomization, render_cluster_access
from gitops.render.yamlio import dump_documents, load_documents
from gitops.repo import (
    GitRepository,
    Identity,
    MergeConflict,
    Remote,
    RemoteError,
    RemoteUnavailable,
    Snapshot,
    format_message,
)
from gitops.specs import (
    Flavor,
    FleetSpec,
    NodeReservation,
    PortalDeploySpec,
    SpecError,
    TenantSpec,
)
from gitops.usertext import user_text
from portal.audit import record_audit
from portal.jobs import enqueue, enqueue_unless_waiting

logger = logging.getLogger(__name__)

Changes = Mapping[str, bytes | None]


@lru_cache(maxsize=4)
def _open_repository(path: str, main: str) -> GitRepository:
    return GitRepository.open_or_init(Path(path), main=main)


def repository() -> GitRepository:
    """The fleet repository (a bare repo under var/ by default; a mirror of the remote in
    remote-truth mode, fetching what it lacks from there)."""
    repo = _open_repository(str(settings.GITOPS_REPO_PATH), settings.GITOPS_MAIN_BRANCH)
    remote = remote_truth()
    repo.on_missing = (lambda rev: repo.fetch_missing(remote, rev)) if remote else None
    return repo


# --- several replicas: a Git remote as the source of truth ----------------------------------


def remote_truth() -> Remote | None:
    """The remote that holds the truth when several replicas share it, else None.

    GITOPS_REMOTE_URL without GITOPS_FORGE means remote-truth: every write of main is a
    compare-and-swap push there (``write_main``) and change branches are pushed as written.
    With a forge, main is written by the forge's merges and the portal only follows it.
    """
    if not settings.GITOPS_REMOTE_URL or settings.GITOPS_FORGE:
        return None
    return Remote(
        settings.GITOPS_REMOTE_URL,
        settings.GITOPS_REMOTE_USERNAME,
        settings.GITOPS_REMOTE_PASSWORD,
        timeout=settings.GITOPS_REMOTE_TIMEOUT_SECONDS,
    )


def publish_branch(name: str, sha: str | None) -> None:
    """Put a change's branch on the remote (None: delete it there), so that any replica can
    check, show and merge it. Nothing to do without remote-truth."""
    remote = remote_truth()
    if remote is None:
        return
    try:
        repository().push_branches(remote, {name: sha})
    except RemoteError as exc:
        raise ValidationError(f"The Git remote did not take the branch {name}: {exc}") from exc


def delete_change_branch(name: str, *, expected: str) -> None:
    """Delete a change's branch here and on the remote (an orphan of a rolled-back change)."""
    repository().delete_branch(name, expected=expected)
    publish_branch(name, None)


def refresh_mirror() -> tuple[str | None, str | None]:
    """Fetch the remote's main into this replica's mirror (before, after); no-op without
    remote-truth. Reads of main between refreshes may lag; writes always fetch first."""
    remote = remote_truth()
    repo = repository()
    head = repo.head(settings.GITOPS_MAIN_BRANCH)
    if remote is None:
        return head, head
    try:
        return repo.refresh_from(remote)
    except RemoteError as exc:
        # Reading on is fine (a write would fetch again, and wait for the remote).
        logger.warning("could not refresh the mirror of the Git remote: %s", exc)
        return head, head


def _already_merged(repo: GitRepository, change: ChangeRequest) -> str | None:
    """The commit on main that merged ``change`` already, found by its Change-Request trailer.

    A replica that pushed the merge and died before its database transaction committed left
    the change open with its commit on the remote: merging again must find it, not add it twice.
    """
    tip = repo.head(settings.GITOPS_MAIN_BRANCH)
    if tip is None:
        return None
    return repo.first_parent_with_trailer(
        tip, change.base_sha or None, "Change-Request", str(change.pk)
    )


def reconcile_merged(*, window: int = 10_000) -> list[int]:
    """Record as merged every open change whose commit is on main (its Change-Request trailer),
    which a replica pushed without living to commit its row; returns their ids.

    Walks main's first-parent line back to the oldest open change's creation (an open change
    cannot be on main from before it existed), at most ``window`` commits. Each change is
    locked first: a replica still finishing that merge holds the lock, and it is then merged.
    """
    oldest = (
        ChangeRequest.objects.filter(status=ChangeRequest.Status.OPEN)
        .order_by("created_at")
        .values_list("created_at", flat=True)
        .first()
    )
    repo = repository()
    tip = repo.head(settings.GITOPS_MAIN_BRANCH)
    if oldest is None or tip is None:
        return []
    # Commit times are whole seconds from each replica's clock: an hour of slack for skew.
    found = repo.trailer_values(
        tip, "Change-Request", since=oldest - timedelta(hours=1), limit=window
    )
    pks = [int(v) for v in found if v.isdigit()]
    recorded = []
    for pk in ChangeRequest.objects.filter(
        pk__in=pks, status=ChangeRequest.Status.OPEN
    ).values_list("pk", flat=True):
        with transaction.atomic():
            change = ChangeRequest.objects.select_for_update().get(pk=pk)
            if not change.is_open:
                continue
            _record_merge(
                change,
                found[str(pk)],
                acting_user=None,
                audit={"reconciled": [None, "found on main by its Change-Request trailer"]},
            )
            recorded.append(pk)
    return recorded


def _log_wait(reason: str) -> None:
    logger.warning("waiting for the Git remote: %s", reason)


def identity(user: Any) -> Identity:
    if user is None or not getattr(user, "pk", None):
        return Identity(settings.GITOPS_COMMITTER_NAME, settings.GITOPS_COMMITTER_EMAIL)
    name = user.get_full_name() or user.username
    return Identity(name, user.email or f"{user.username}@users.portal.invalid")


def _trailer(user: Any) -> str:
    ident = identity(user)
    # The name is the user's own (profile, identity provider): no mentions in a forge's view.
    return f"{user_text(ident.name, single_line=True)} <{ident.email}>"


# The branch of every change request; a forge event about any other head branch is not ours.
CHANGE_BRANCH = re.compile(r"change/[1-9][0-9]*")


def change_branch(pk: int) -> str:
    return f"change/{pk}"


# The commit of main one rendering reads (``reading_main``), or None: read main afresh.
_PINNED_MAIN: ContextVar[str | None] = ContextVar("gitops_pinned_main", default=None)


def main_sha() -> str | None:
    """Main's commit: inside ``reading_main``, the one it was at when that began."""
    pinned = _PINNED_MAIN.get()
    return pinned if pinned is not None else repository().head(settings.GITOPS_MAIN_BRANCH)


@contextmanager
def reading_main() -> Iterator[str | None]:
    """Read main once for everything inside: the tenant's spec on main (``tenant_spec_on_main``),
    the files a change writes against it (``tenant_changes``, ``cluster_access_changes``) and
    the base its branch starts from (``open_change``) are all that one commit.

    Without it each read takes main afresh, and a merge landing between them makes a change
    rendered from the older main but diffed against, and branched from, the newer: the
    sibling that merged in between shows up as deleted by it (the scope check refused such
    changes in an approval burst of ten requests per tenant, docs/benchmarks.md). Branched
    from the commit it was rendered from, the change merges as its request onto whatever main
    is by then (``replaying``). Nested uses keep the outer commit."""
    if _PINNED_MAIN.get() is not None:
        yield _PINNED_MAIN.get()
        return
    _, sha = refresh_mirror()  # a forge's main, not a lagging mirror's
    token = _PINNED_MAIN.set(sha)
    try:
        yield sha
    finally:
        _PINNED_MAIN.reset(token)


T = TypeVar("T")


def write_main(
    attempt: Callable[[GitRepository], T], *, on_wait: Callable[[str], None] | None = None
) -> T:
    """Run ``attempt``, which writes main (compare-and-swap) in the repository it is given.

    The one door to main: every merge and every direct commit goes through here, so that
    where the source of truth lives (this replica's bare repository, or a Git remote that
    several replicas share) is decided in one place and not by each writer.

    In remote-truth mode (``remote_truth()``) ``attempt`` runs on the remote's fetched tip
    and its result is pushed with a lease; when another replica got there first, it runs
    again on the new tip. Returning means main on the remote holds the write, so a merge
    commit's id is final. An unreachable remote is waited for, up to
    GITOPS_REMOTE_WAIT_SECONDS, then :class:`RemoteUnavailable` (main untouched).
    """
    repo = repository()
    remote = remote_truth()
    if remote is None:
        return attempt(repo)
    return repo.write_through(
        remote,
        attempt,
        wait=settings.GITOPS_REMOTE_WAIT_SECONDS,
        on_wait=on_wait or _log_wait,
    )


def ensure_bootstrapped(fleet: FleetSpec) -> str:
    """Give an empty repository its platform layout (clusters/, infrastructure/, tenants/).

    This first commit goes straight to main: there is nothing yet to review it against, and
    the platform team owns it. Every later change is a change request.
    """
    # What a change is computed against: the remote's main, not a lagging mirror's.
    _, sha = refresh_mirror()
    if sha is not None:
        return sha
    files: dict[str, bytes | None] = {}
    files.update(render_cluster_bootstrap(fleet))
    files.update(render_infrastructure(fleet))
    files.update(render_tenants_index([]))
    return write_main(
        lambda main: main.commit(
            files,
            message=format_message(
                f"Bootstrap the {fleet.name} fleet repository",
                "Cluster sync, platform infrastructure and an empty tenant index.",
                {},
            ),
            author=identity(None),
            branch=settings.GITOPS_MAIN_BRANCH,
            expected_parent=None,
        )
    )


def flux_components_changes(fleet: FleetSpec, components: bytes) -> dict[str, bytes | None]:
    """What to write so that main holds the Flux controllers (``flux install --export``
    output) and the lockdown patches them: ``gotk-components.yaml`` and the flux-system
    kustomization rendered with it. Only what differs from main."""
    bootstrap = render_cluster_bootstrap(fleet, include_components=True)
    base = f"clusters/{fleet.name}/flux-system"
    wanted = {
        f"{base}/gotk-components.yaml": components,
        f"{base}/kustomization.yaml": bootstrap[f"{base}/kustomization.yaml"],
    }
    repo = repository()
    main = main_sha()
    if main is None:
        raise ValidationError("The fleet repository is not bootstrapped yet.")
    return {path: data for path, data in wanted.items() if repo.read_file(main, path) != data}


def flux_components_title(fleet: FleetSpec) -> str:
    return f"Commit the Flux controllers of the {fleet.name} fleet"


def open_flux_components_change(
    fleet: FleetSpec, components: bytes, *, acting_user: Any
) -> ChangeRequest:
    """Open the change that commits ``components`` (``flux install --export`` output) with the
    lockdown patches (``flux_components_changes``), a platform change for review; raises
    ``ValidationError`` when main holds them already."""
    with reading_main():
        return open_change(
            acting_user=acting_user,
            title=flux_components_title(fleet),
            description=(
                "gotk-components.yaml from `flux install --export`; the flux-system "
                "kustomization now lists it and patches the controllers (lockdown)."
            ),
            changes=flux_components_changes(fleet, components),
            scope=[],  # the platform's files: no tenant's resources
        )


def portal_deployment_changes(spec: PortalDeploySpec, fleet: FleetSpec) -> dict[str, bytes | None]:
    """What to write so that main holds the portal's own deployment as ``spec`` says
    (``gitops.render.portal``): the component, its Flux Kustomizations, and ``portal.yaml``
    among the cluster kustomization's resources (entries already there are kept). Only what
    differs from main; raises ``ValidationError`` for a bad spec, before anything is read."""
    try:
        wanted = render_portal_component(spec, fleet)
    except SpecError as exc:
        raise ValidationError(
            [f"{field}: {message}" for field, message in sorted(exc.errors.items())]
        ) from exc
    repo = repository()
    main = repo.head(settings.GITOPS_MAIN_BRANCH)
    if main is None:
        raise ValidationError("The fleet repository is not bootstrapped yet.")
    path = f"clusters/{fleet.name}/kustomization.yaml"
    current = repo.read_file(main, path)
    documents = load_documents(current) if current is not None else []
    resources = documents[0].get("resources", []) if documents else []
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise ValidationError(f"{path} on main has no plain list of resources to add to.")
    wanted[path] = dump_documents([cluster_kustomization([*resources, PORTAL_FLUX_FILE])])
    return {p: data for p, data in wanted.items() if repo.read_file(main, p) != data}


def _tenant_slugs(repo: GitRepository, rev: str) -> set[str]:
    return {name.rstrip("/") for name in repo.list_dir(rev, "tenants/") if name.endswith("/")}


def tenant_on_main(slug: str) -> bool:
    """Whether the tenant's directory is on main (its onboarding is merged)."""
    repo = repository()
    main = repo.head(settings.GITOPS_MAIN_BRANCH)
    return main is not None and slug in _tenant_slugs(repo, main)


def tenant_spec_at(
    rev: str | None, slug: str, *, snapshot: Snapshot | None = None
) -> TenantSpec | None:
    """The tenant as the spec files under ``tenants/<slug>/spec/`` at ``rev`` (or in
    ``snapshot``) say; None when there are none (not onboarded there, or written before the
    directory carried its spec). A spec file that does not parse is a ``SpecError``."""
    prefix = f"tenants/{slug}/"
    if snapshot is not None:
        files = snapshot.read_tree(prefix + specfiles.SPEC_DIR)
    elif rev is None:
        return None
    else:
        files = repository().read_tree(rev, prefix + specfiles.SPEC_DIR)
    if not files:
        return None
    return specfiles.parse_spec_files(slug, {p[len(prefix) :]: b for p, b in files.items()})


def tenant_spec_on_main(slug: str) -> TenantSpec | None:
    """The tenant as main holds it: what every change of the tenant starts from."""
    return tenant_spec_at(main_sha(), slug)


def reservations_on_main() -> dict[str, tuple[str, NodeReservation]]:
    """Node name -> (tenant slug, its ``NodeReservation``), over every tenant main holds: the
    truth the node marks follow (``fleet.reservations``). A file that does not parse is left
    out and logged (the checks refuse a change that writes one)."""
    repo, base = repository(), main_sha()
    if base is None:
        return {}
    found: dict[str, tuple[str, NodeReservation]] = {}
    for slug in sorted(_tenant_slugs(repo, base)):
        prefix = f"tenants/{slug}/{specfiles.SPEC_DIR}/reservations/"
        for name in repo.list_dir(base, prefix):
            data = repo.read_file(base, prefix + name)
            try:
                item = specfiles.from_json(NodeReservation, json.loads(data or b""))
            except (SpecError, ValueError) as exc:
                logger.error("unreadable reservation %s%s on main: %s", prefix, name, exc)
                continue
            found.setdefault(item.name, (slug, item))
    return found


def _spec_paths(change: ChangeRequest) -> dict[str, list[str]]:
    """{tenant slug: the spec files the change writes or deletes}."""
    found: dict[str, list[str]] = {}
    for path in change.files_changed:
        parts = path.split("/", 3)
        if len(parts) == 4 and parts[0] == "tenants" and parts[2] == specfiles.SPEC_DIR:
            found.setdefault(parts[1], []).append(path)
    return found


def replaying(
    change: ChangeRequest, *, ours: bool = False
) -> Callable[[Snapshot], dict[str, bytes | None]] | None:
    """How to merge ``change`` onto a tip that moved since its base, as the request it carries
    and not as text: for each tenant whose spec it changes, its own spec files (what it was
    asked to do: a resource added, changed or removed, the settings, the members) are applied
    to the tip's spec, and the tenant's directory is rendered again from the result. So two
    changes of one tenant opened side by side both land whole, whatever order they merge in,
    and neither undoes the other (a textual merge of the quota both rewrite would clash, or
    worse, succeed with one of them missing).

    A true conflict stays one: a spec file the change writes that the tip changed since the
    change's base (two requests for the same resource) raises ``MergeConflict``, as does a
    spec the tip holds that does not parse. Files outside the tenants' spec-bearing
    directories are merged as their content, as ``regenerating_index`` does; the tenant index
    is rendered again. None: the change carries no spec files (a platform change, or one
    opened before directories carried their spec): merge it as text. ``ours``: the change's
    own files win over the tip's (updating its branch, where its author chooses them)."""
    by_tenant = _spec_paths(change)
    if not by_tenant:
        return None
    repo = repository()
    own_spec = {p: repo.read_file(change.head_sha, p) for ps in by_tenant.values() for p in ps}
    others = [
        p
        for p in change.files_changed
        if p != TENANT_INDEX and not any(p.startswith(f"tenants/{slug}/") for slug in by_tenant)
    ]
    own_other = {p: repo.read_file(change.head_sha, p) for p in others}
    before, after = _tenant_slugs(repo, change.base_sha), _tenant_slugs(repo, change.head_sha)

    def build(tip: Snapshot) -> dict[str, bytes | None]:
        # As Git's rule: a file both sides changed the same way is no clash.
        mine = {**own_spec, **own_other}
        clashes = [
            p
            for p, b in mine.items()
            if not ours and tip.read_file(p) not in (repo.read_file(change.base_sha, p), b)
        ]
        if clashes:
            raise MergeConflict(clashes)
        fleet = configured_fleet()
        changes: dict[str, bytes | None] = dict(own_other)
        for slug in by_tenant:
            prefix = f"tenants/{slug}/"
            current = tip.read_tree(prefix)
            spec_dir = f"{prefix}{specfiles.SPEC_DIR}/"
            spec: dict[str, bytes | None] = {
                p: b for p, b in current.items() if p.startswith(spec_dir)
            }
            spec.update(own_spec_of(slug))
            files = {p[len(prefix) :]: b for p, b in spec.items() if b is not None}
            if not files:  # every spec file deleted: the tenant's directory goes (offboarding)
                changes.update(dict.fromkeys(current))
                continue
            try:
                tenant = specfiles.parse_spec_files(slug, files)
                wanted = render_tenant_tree(tenant, fleet)
            except SpecError as exc:
                raise MergeConflict([f"{prefix}{specfiles.SPEC_DIR} ({exc})"]) from exc
            changes.update({p: b for p, b in wanted.items() if current.get(p) != b})
            changes.update({p: None for p in current if p not in wanted})
        if TENANT_INDEX in change.files_changed or before != after:
            slugs = {d.rstrip("/") for d in tip.list_dir("tenants/") if d.endswith("/")}
            changes.update(render_tenants_index((slugs | (after - before)) - (before - after)))
        return changes

    def own_spec_of(slug: str) -> dict[str, bytes | None]:
        return {p: b for p, b in own_spec.items() if p.startswith(f"tenants/{slug}/")}

    return build


def tenants_untouched(change: ChangeRequest, tip: Snapshot) -> bool:
    """Whether the directories of the tenants whose spec ``change`` writes are on ``tip`` as on
    the change's base: then merging its files three-way gives what ``replaying`` would."""
    repo = repository()
    return all(
        tip.object_id(f"tenants/{slug}") == repo.object_id(change.base_sha, f"tenants/{slug}")
        for slug in _spec_paths(change)
    )


def same_request(old: ChangeRequest, new: ChangeRequest) -> bool:
    """Whether ``new`` asks main for exactly what ``old`` asked: the same spec files written
    with the same content, each starting from the same content on its base. Then what a
    reviewer approved in ``old`` is what ``new`` does, although files derived from the
    tenant's whole spec (its quota, its queues) differ because other requests merged between
    the two bases: those requests were reviewed on their own. A change without spec files
    (written before directories carried their spec) is the same only when every file it
    touches is byte-identical at both heads."""
    repo = repository()
    paths_old, paths_new = _spec_paths(old), _spec_paths(new)
    if not paths_old or not paths_new:
        touched = set(old.files_changed) | set(new.files_changed)
        return all(
            repo.read_file(old.head_sha, p) == repo.read_file(new.head_sha, p) for p in touched
        )
    if paths_old != paths_new:
        return False
    return all(
        repo.read_file(old.head_sha, p) == repo.read_file(new.head_sha, p)
        and repo.read_file(old.base_sha, p) == repo.read_file(new.base_sha, p)
        for paths in paths_old.values()
        for p in paths
    )


def tenant_changes(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, bytes | None]:
    """What to write so that main holds ``tenant`` as specified: added, changed, deleted files.

    The tenant directory is rendered whole from the spec and compared with main, so removing a
    resource from the spec deletes its files (Flux prunes them) and an unchanged spec is empty.
    """
    repo = repository()
    base = _PINNED_MAIN.get() or ensure_bootstrapped(fleet)
    prefix = f"tenants/{tenant.slug}/"
    current = repo.read_tree(base, prefix)
    wanted = render_tenant_tree(tenant, fleet)
    changes: dict[str, bytes | None] = {p: b for p, b in wanted.items() if current.get(p) != b}
    changes.update({p: None for p in current if p not in wanted})
    if not current:
        # A new tenant: the index, derived from the tenant directories, gains it. For one main
        # already has it stays as it is, and is not rendered again: at 10,000 tenants that
        # costs half a second, most of an approval (docs/benchmarks.md, approval burst).
        index = render_tenants_index(_tenant_slugs(repo, base) | {tenant.slug})
        changes.update({p: b for p, b in index.items() if repo.read_file(base, p) != b})
    return changes


def cluster_access_changes(tenant: TenantSpec, fleet: FleetSpec) -> dict[str, bytes | None]:
    """What to write so that the access directories of the tenant's clusters on main bind
    ``tenant.members`` exactly. Only clusters main already has an access directory for: a
    cluster still waiting for its own change gets its bindings rendered with it."""
    repo = repository()
    base = main_sha()
    if base is None:
        return {}  # no main, so no cluster yet: nothing to bind anyone in
    on_main = tenant_spec_at(base, tenant.slug)
    if on_main is not None:
        if not on_main.clusters:
            return {}  # no cluster to bind anyone in (a new one narrows them: desired_tenant)
        # Main's tenant with these members: their spec file and the bindings, nothing else.
        return tenant_changes(dataclasses.replace(on_main, members=tenant.members), fleet)
    access = f"tenants/{tenant.slug}/{ACCESS_DIR}/"
    names = [entry.rstrip("/") for entry in repo.list_dir(base, access) if entry.endswith("/")]
    wanted = render_cluster_access(tenant, names, fleet)
    return {p: b for p, b in wanted.items() if repo.read_file(base, p) != b}


def tenant_removal_changes(slug: str, fleet: FleetSpec) -> dict[str, bytes | None]:
    """Delete a tenant's whole directory and drop it from the index (offboarding)."""
    repo = repository()
    base = ensure_bootstrapped(fleet)
    changes: dict[str, bytes | None] = dict.fromkeys(repo.read_tree(base, f"tenants/{slug}/"))
    index = render_tenants_index(_tenant_slugs(repo, base) - {slug})
    changes.update({p: b for p, b in index.items() if repo.read_file(base, p) != b})
    return changes


@transaction.atomic
def open_change(
    *,
    acting_user: Any,
    title: str,
    changes: Changes,
    kind: str = ChangeRequest.Kind.PLATFORM,
    tenant_slug: str = "",
    description: str = "",
    requested_by: Any = None,
    allow_overcommit: bool = False,
    run_checks: bool = True,
    scope: list[str] | None = None,
    close_action: str = "",
    close_barred: Iterable[int] = (),
) -> ChangeRequest:
    """Commit ``changes`` on a new branch ``change/<id>`` from main and open it for review.

    ``run_checks=False`` leaves out the change's own check run: for a change that goes into
    the merge queue at once, whose batch runs the checks over it with the others.
    ``close_action`` and ``close_barred`` say who may not close it (``ChangeRequest``)."""
    if not changes:
        raise ValidationError("Nothing would change: the repository already matches this.")
    if kind not in ChangeRequest.Kind.values:
        raise ValidationError(f"Unknown change kind '{kind}'.")
    repo = repository()
    base = main_sha()  # inside reading_main: the commit its files were computed against
    if base is None:
        raise ValidationError("The fleet repository is not bootstrapped yet.")
    requester = requested_by or acting_user
    # The title is also the commit's subject and the forge's pull request title: one line.
    title = " ".join(title.split())[:200]
    change = ChangeRequest.objects.create(
        title=title,
        description=description,
        kind=kind,
        tenant_slug=tenant_slug,
        author=acting_user if getattr(acting_user, "pk", None) else None,
        requested_by=requester if getattr(requester, "pk", None) else None,
        allow_overcommit=allow_overcommit,
        base_sha=base,
        files_changed=sorted(changes),
        scope=sorted(set(scope)) if scope is not None else None,
        close_action=close_action,
        close_barred=sorted(set(close_barred)),
    )
    change.branch = change_branch(change.pk)
    trailers = {"Change-Request": str(change.pk), "Requested-by": _trailer(requester)}
    if tenant_slug:
        trailers["Tenant"] = tenant_slug
    repo.create_branch(change.branch, at=base)
    head = base
    try:
        head = change.head_sha = repo.commit(
            changes,
            message=format_message(title, description, trailers),
            author=identity(requester),
            branch=change.branch,
            expected_parent=base,
        )
        publish_branch(change.branch, change.head_sha)
    except Exception:
        # The row is rolled back with the transaction; the branch must go with it.
        repo.delete_branch(change.branch, expected=head)
        raise
    change.save(update_fields=["branch", "head_sha"])
    record_audit(
        actor=acting_user,
        action="change.open",
        target=change,
        tenant_slug=tenant_slug,
        diff={"files": [None, len(change.files_changed)], "head": [None, change.head_sha[:12]]},
    )
    _schedule_checks(change, acting_user, run_checks=run_checks)
    return change


def schedule_checks(change: ChangeRequest, acting_user: Any) -> None:
    """Run the change's own checks after commit (one opened with ``run_checks=False`` that
    did not go into the merge queue after all)."""
    enqueue(
        "gitops.run_checks",
        title=f"Checks for change #{change.pk}",
        created_by=acting_user,
        change_id=change.pk,
        sha=change.head_sha,
    )


def _schedule_checks(change: ChangeRequest, acting_user: Any, *, run_checks: bool = True) -> None:
    if settings.GITOPS_FORGE and not change.forge_number:
        enqueue(
            "gitops.open_forge_pull_request",
            title=f"Open change #{change.pk} on the forge",
            created_by=acting_user,
            change_id=change.pk,
        )
    if run_checks or settings.GITOPS_FORGE:
        schedule_checks(change, acting_user)


def _locked(change: ChangeRequest) -> ChangeRequest:
    return ChangeRequest.objects.select_for_update().get(pk=change.pk)


def refusal(acting_user: Any, action: str, change: ChangeRequest) -> str:
    """ "" when ``acting_user`` may review, merge (or update) or close ``change``, else the
    sentence that says who may.

    The rules and their sentences live with the roles, in the access module that
    settings.GITOPS_CHANGE_POLICY names (gitops knows no tenants or roles: dependencies point
    the other way). No ``acting_user`` is the portal itself, acting on what a service already
    decided (closing a superseded change, say); a view always passes the signed-in user.
    """
    if acting_user is None:
        return ""
    policy = import_string(settings.GITOPS_CHANGE_POLICY)
    return str(policy(acting_user, action, change))


def may(acting_user: Any, action: str, change: ChangeRequest) -> bool:
    """Whether ``acting_user`` may review, merge (or update) or close ``change``."""
    return not refusal(acting_user, action, change)


def _require(acting_user: Any, action: str, change: ChangeRequest) -> None:
    refused = refusal(acting_user, action, change)
    if refused:
        raise PermissionDenied(refused)


def _require_open(change: ChangeRequest) -> None:
    if not change.is_open:
        raise ValidationError(f"Change #{change.pk} is {change.get_status_display().lower()}.")


@transaction.atomic
def do_review(change: ChangeRequest, *, acting_user: Any, state: str, body: str = "") -> Review:
    _require(acting_user, "review", change)
    change = _locked(change)
    _require_open(change)
    if state not in Review.State.values:
        raise ValidationError(f"Unknown review state '{state}'.")
    if state == Review.State.APPROVE and acting_user.pk in {
        change.author_id,
        change.requested_by_id,
    }:
        raise ValidationError("You cannot approve a change you opened or requested.")
    if state == Review.State.REQUEST_CHANGES and not body.strip():
        raise ValidationError({"body": "Say what needs to change."})
    review = Review.objects.create(
        change=change, reviewer=acting_user, state=state, body=body, sha=change.head_sha
    )
    record_audit(
        actor=acting_user,
        action=f"change.review.{state}",
        target=change,
        tenant_slug=change.tenant_slug,
        diff={"review": [None, state]},
    )
    return review


def review_summary(change: ChangeRequest) -> tuple[list[Any], list[Any]]:
    """(approvers, blockers) among the latest verdict of each reviewer on the current head."""
    latest: dict[int, Review] = {}
    if "reviews" in getattr(change, "_prefetched_objects_cache", {}):
        # Read with the change (the merge queue's batch of hundreds), in the same order.
        reviews = [r for r in change.reviews.all() if r.sha == change.head_sha]
    else:
        reviews = list(change.reviews.filter(sha=change.head_sha).select_related("reviewer"))
    for review in reviews:
        if review.state != Review.State.COMMENT:
            latest[review.reviewer_id] = review
    approvers = [r.reviewer for r in latest.values() if r.state == Review.State.APPROVE]
    blockers = [r.reviewer for r in latest.values() if r.state == Review.State.REQUEST_CHANGES]
    return approvers, blockers


PARTIAL_REFUSED = (
    "Checks are partial (something was not validated) and this portal merges only changes "
    "whose checks passed (GITOPS_ALLOW_PARTIAL_CHECKS is off): give the checks the CRDs "
    "(manage.py fetch_schemas, or the cluster's) and run them again."
)


def merge_blockers(change: ChangeRequest) -> list[str]:
    """Why the change cannot be merged now; empty when it can."""
    if not change.is_open:
        return [f"The change is {change.get_status_display().lower()}."]
    reasons = []
    if change.checks_state == ChangeRequest.Checks.PENDING:
        reasons.append("Checks are still running.")
    elif change.checks_state == ChangeRequest.Checks.FAILED:
        reasons.append("Checks failed.")
    elif not change.checks_mergeable:
        reasons.append(PARTIAL_REFUSED)
    approvers, blockers = review_summary(change)
    needed = settings.GITOPS_REQUIRED_APPROVALS
    if len(approvers) < needed:
        reasons.append(f"{len(approvers)} of {needed} required approvals.")
    if blockers:
        names = ", ".join(sorted(u.username for u in blockers))
        reasons.append(f"Changes requested by {names}.")
    if settings.GITOPS_FORGE:
        reasons.append("This change is merged on the forge, not in the portal.")
    return reasons


@transaction.atomic
def do_merge(change: ChangeRequest, *, acting_user: Any) -> ChangeRequest:
    _require(acting_user, "merge", change)
    change = _locked(change)
    reasons = merge_blockers(change)
    if reasons:
        raise ValidationError(reasons)
    approvers, _ = review_summary(change)
    return _merge(
        change,
        acting_user=acting_user,
        approved_by=", ".join(_trailer(u) for u in approvers),
        audit={},
    )


def _merge_message(change: ChangeRequest, acting_user: Any, approved_by: str, **extra: str) -> str:
    """The squash commit's message: the change's title and description, and trailers naming
    the change, its requester, its approvers and who merged it."""
    trailers = {
        "Change-Request": str(change.pk),
        "Requested-by": _trailer(change.requested_by or change.author),
        "Approved-by": approved_by,
        "Merged-by": _trailer(acting_user),
    }
    if change.tenant_slug:
        trailers["Tenant"] = change.tenant_slug
    trailers.update(extra)
    return format_message(change.title, change.description, trailers)


def _merge(
    change: ChangeRequest, *, acting_user: Any, approved_by: str, audit: dict[str, list[Any]]
) -> ChangeRequest:
    """Squash the locked, mergeable ``change`` onto main and publish it after commit."""
    message = _merge_message(change, acting_user, approved_by)
    author, committer = identity(change.requested_by or change.author), identity(acting_user)
    try:
        try:
            head = repository().head(settings.GITOPS_MAIN_BRANCH)
            replay = replaying(change) if head != change.base_sha else None
            if replay is not None:
                # Main moved since the change was rendered: its request, not its text, goes on
                # top (two changes of one tenant each rewrite its quota; see ``replaying``).
                return _record_merge(
                    change,
                    _merge_rebuilt(change, replay, message, author, committer),
                    acting_user=acting_user,
                    audit={**audit, "replayed": [change.base_sha[:12], "main's tip"]},
                )
            # The reviewed head by id, not the branch: a replica's copy of the branch may lag.
            sha = write_main(
                lambda repo: (
                    _already_merged(repo, change)
                    or repo.merge(
                        change.head_sha,
                        into=settings.GITOPS_MAIN_BRANCH,
                        message=message,
                        author=author,
                        committer=committer,
                    )
                )
            )
        except MergeConflict as exc:
            if list(exc.paths) != [TENANT_INDEX]:
                raise
            sha = _merge_rebuilt(change, regenerating_index(change), message, author, committer)
    except MergeConflict as exc:
        raise ValidationError(
            "This change conflicts with main in "
            f"{', '.join(exc.paths)}; update the branch and review it again."
        ) from exc
    except RemoteUnavailable as exc:
        raise ValidationError(
            f"Waiting for the Git remote: {exc}. The change stays open and unmerged; merge it "
            "again once the remote answers."
        ) from exc
    return _record_merge(change, sha, acting_user=acting_user, audit=audit)


def _record_merge(
    change: ChangeRequest,
    sha: str,
    *,
    acting_user: Any,
    audit: dict[str, list[Any]],
    publish: bool = True,
) -> ChangeRequest:
    """Mark the locked ``change`` merged as ``sha``, with its audit row, and publish it after
    commit: what every way of merging (one change, a merge queue batch) does once main holds
    the change's commit. A batch publishes its changes together (``publish=False`` here)."""
    change.status = ChangeRequest.Status.MERGED
    change.merge_sha = sha
    change.merged_by = acting_user if getattr(acting_user, "pk", None) else None
    change.merged_at = timezone.now()
    change.apply_state = ChangeRequest.Apply.PENDING
    change.save()
    record_audit(
        actor=acting_user,
        action="change.merge",
        target=change,
        tenant_slug=change.tenant_slug,
        diff={"status": ["open", "merged"], "merge": [None, sha[:12]], **audit},
    )
    if publish:
        enqueue(
            "gitops.after_merge",
            title=f"Publish change #{change.pk}",
            created_by=acting_user,
            change_id=change.pk,
        )
    return change


# --- the merge queue (gitops.merge_queue runs the batches) ---------------------------------


def queue_blockers(change: ChangeRequest) -> list[str]:
    """Why the change cannot go into the merge queue now; empty when it can.

    As for a merge, except that its own checks need not have finished: the batch checks it
    with the others. Checks that already failed on its head keep it out."""
    pending = "Checks are still running."
    return [reason for reason in merge_blockers(change) if reason != pending]


def queued_entry(change: ChangeRequest) -> MergeQueueEntry | None:
    """The change's queued or checking entry, if it is in the queue."""
    return change.queue_entries.filter(state__in=MergeQueueEntry.ACTIVE).first()


@transaction.atomic
def do_enqueue_merge(change: ChangeRequest, *, acting_user: Any) -> MergeQueueEntry:
    """Put an approved change into the merge queue ("merge when ready"): the next batch
    squashes it onto main with the others queued before it, checks the combined tree once and
    merges them together. Who may do it: who may merge the change."""
    _require(acting_user, "merge", change)
    change = _locked(change)
    reasons = queue_blockers(change)
    if reasons:
        raise ValidationError(reasons)
    if queued_entry(change) is not None:
        raise ValidationError(f"Change #{change.pk} is already in the merge queue.")
    entry = MergeQueueEntry.objects.create(
        change=change, enqueued_by=acting_user if getattr(acting_user, "pk", None) else None
    )
    record_audit(
        actor=acting_user,
        action="change.enqueue",
        target=change,
        tenant_slug=change.tenant_slug,
        diff={"merge_queue": [None, "queued"]},
    )
    # One waiting run is enough: it claims whatever is queued when it starts. Looked at after
    # commit, so a run seen waiting starts after this entry is visible (a burst of a thousand
    # approvals made a thousand runs, all but a few with nothing to do).
    transaction.on_commit(lambda: _kick_merge_queue(change.pk, acting_user))
    return entry


def _kick_merge_queue(change_id: int, acting_user: Any) -> None:
    # A runner working through the queue takes this change too: it claims batch after batch
    # while anything is queued and looks once more after letting the lease go. A run queued
    # now would only find the lease taken (in a burst, one per approval, each a worker's time).
    from gitops.merge_queue import lease_held  # the queue's module builds on this one

    if lease_held():
        return
    enqueue_unless_waiting(
        "gitops.merge_queue",
        title=f"Merge queue (change #{change_id} added)",
        created_by=acting_user,
    )


@transaction.atomic
def do_dequeue(change: ChangeRequest, *, acting_user: Any, reason: str = "") -> MergeQueueEntry:
    """Take a queued change out of the merge queue. A change whose batch is already being
    checked stays: the batch decides it (a merge can no longer be half-taken back)."""
    _require(acting_user, "merge", change)
    entry = (
        MergeQueueEntry.objects.select_for_update()
        .filter(change=change, state__in=MergeQueueEntry.ACTIVE)
        .first()
    )
    if entry is None:
        raise ValidationError(f"Change #{change.pk} is not in the merge queue.")
    if entry.state != MergeQueueEntry.State.QUEUED:
        raise ValidationError(
            f"Change #{change.pk} is being checked in a batch now; it can no longer be taken out."
        )
    entry.state = MergeQueueEntry.State.REMOVED
    entry.reason = " ".join(reason.split())[:500] or "taken out of the queue"
    entry.finished_at = timezone.now()
    entry.save(update_fields=["state", "reason", "finished_at"])
    record_audit(
        actor=acting_user,
        action="change.dequeue",
        target=change,
        tenant_slug=change.tenant_slug,
        diff={"merge_queue": ["queued", "removed"], "reason": [None, entry.reason[:200]]},
    )
    return entry


def narrowing(change: ChangeRequest) -> tuple[bool, str]:
    """Whether the change only takes tenant cluster access away (``narrows_only`` on its
    base and head), and what it takes away or why it is not such a change."""
    if not change.tenant_slug or not change.base_sha or not change.head_sha:
        return False, "not a tenant change"
    others = [p for p in change.files_changed if not is_access_file(p)]
    if others:  # most changes: known without reading the trees
        return False, f"{others[0]} is not a cluster's bindings file"
    repo = repository()
    prefix = f"tenants/{change.tenant_slug}/{ACCESS_DIR}/"
    members = f"tenants/{change.tenant_slug}/{specfiles.MEMBERS_FILE}"

    def tree(rev: str) -> dict[str, bytes]:
        files = repo.read_tree(rev, prefix)
        data = repo.read_file(rev, members)
        if data is not None:
            files[members] = data
        return files

    return narrows_only(tree(change.base_sha), tree(change.head_sha), change.files_changed)


@transaction.atomic
def do_merge_revocation(change: ChangeRequest) -> ChangeRequest | None:
    """Merge, without a review, an open change whose checks passed and that only takes cluster
    access away (``narrowing``); None, and nothing done, for any other change.

    Why no reviewer: such a change can only remove people from a tenant's clusters or narrow
    their role there, and every minute it waits for one keeps a removed member in. The rule is
    read from the change's own diff, never from whoever opened it, and the checks still run
    first. Off with GITOPS_AUTO_MERGE_REVOCATIONS=false; a forge merges its own pull requests.
    """
    if not settings.GITOPS_AUTO_MERGE_REVOCATIONS or settings.GITOPS_FORGE:
        return None
    change = _locked(change)
    if not change.is_open or not change.checks_mergeable:
        return None
    narrows, summary = narrowing(change)
    if not narrows:
        return None
    return _merge(
        change,
        acting_user=None,
        approved_by="none needed: it only takes cluster access away",
        audit={"without_review": [None, summary[:300]]},
    )


TENANT_INDEX = "tenants/kustomization.yaml"


def regenerating_index(change: ChangeRequest) -> Callable[[Snapshot], dict[str, bytes | None]]:
    """What to write to merge ``change`` onto a tip whose only clash with it is the tenant
    index: its own files (each untouched on the tip since the change's base, or
    :class:`MergeConflict`) and the index rendered again from the directories that result."""
    repo = repository()
    before, after = _tenant_slugs(repo, change.base_sha), _tenant_slugs(repo, change.head_sha)
    own = {p: repo.read_file(change.head_sha, p) for p in change.files_changed if p != TENANT_INDEX}

    def build(tip: Snapshot) -> dict[str, bytes | None]:
        clashes = [p for p in own if tip.read_file(p) != repo.read_file(change.base_sha, p)]
        if clashes:
            raise MergeConflict(clashes)
        slugs = {d.rstrip("/") for d in tip.list_dir("tenants/") if d.endswith("/")}
        changes: dict[str, bytes | None] = dict(own)
        changes.update(render_tenants_index((slugs | (after - before)) - (before - after)))
        return changes

    return build


def _merge_rebuilt(
    change: ChangeRequest,
    build: Callable[[Snapshot], dict[str, bytes | None]],
    message: str,
    author: Identity,
    committer: Identity,
) -> str:
    """Merge a change by writing what ``build`` makes of main's tip: ``regenerating_index`` or
    ``replaying``. Compare-and-swap with retry, as any write to main.

    Two onboardings opened side by side each add a line at the same place in
    ``tenants/kustomization.yaml``: a textual conflict, but not a real one, since the index is
    derived from the tenant directories; two requests of one tenant each rewrite its quota and
    queues, derived from its spec. Either way what the change asked for is applied to the tip
    and what is derived is rendered again.
    """
    return write_main(
        lambda main: (
            _already_merged(main, change)
            or main.commit_with_retry(
                build,
                branch=settings.GITOPS_MAIN_BRANCH,
                message=message,
                author=author,
                committer=committer,
            )
        )
    )


@transaction.atomic
def do_close(change: ChangeRequest, *, acting_user: Any, reason: str = "") -> ChangeRequest:
    _require(acting_user, "close", change)
    change = _locked(change)
    _require_open(change)
    change.status = ChangeRequest.Status.CLOSED
    change.closed_at = timezone.now()
    change.save(update_fields=["status", "closed_at", "updated_at"])
    change.queue_entries.filter(state=MergeQueueEntry.State.QUEUED).update(
        state=MergeQueueEntry.State.REMOVED,
        reason="the change was closed",
        finished_at=change.closed_at,
    )
    record_audit(
        actor=acting_user,
        action="change.close",
        target=change,
        tenant_slug=change.tenant_slug,
        diff={"status": ["open", "closed"], "reason": [None, reason[:200]]},
    )
    if settings.GITOPS_ON_CLOSED:
        # What the change carried goes back where the owner of that decision keeps it (a
        # tenant's settings: tenants.services.on_change_closed), in this transaction.
        import_string(settings.GITOPS_ON_CLOSED)(change, acting_user)
    return change


@transaction.atomic
def do_update_branch(change: ChangeRequest, *, acting_user: Any) -> ChangeRequest:
    """Re-apply the change on top of the current main (after main moved on): a tenant's
    change as its request (``replaying``), any other its files.

    Other files keep the content the change gave them; the new diff against main is what
    reviewers approve, so earlier reviews (tied to the old head) no longer count.
    """
    _require(acting_user, "merge", change)
    change = _locked(change)
    _require_open(change)
    repo = repository()
    _, base = refresh_mirror()
    assert base is not None
    if base == change.base_sha:
        raise ValidationError("The branch is already up to date with main.")
    replay = replaying(change, ours=True)
    if replay is not None:
        # Its request onto the new main (``replaying``): the tenant rendered again from main's
        # spec and its own, not its old files, which would undo what merged meanwhile.
        try:
            files = replay(Snapshot(repo, base))
        except MergeConflict as exc:
            raise ValidationError(
                f"This change conflicts with main in {', '.join(exc.paths)}."
            ) from exc
    else:
        files = {p: repo.read_file(change.head_sha, p) for p in change.files_changed}
    changes = {p: b for p, b in files.items() if repo.read_file(base, p) != b}
    if not changes:
        raise ValidationError("Main already contains everything this change would do.")
    repo.create_branch(change.branch, at=base, force=True)
    message = repo.commit_message(change.head_sha)
    change.head_sha = repo.commit(
        changes,
        message=message,
        author=identity(change.requested_by or change.author),
        branch=change.branch,
        expected_parent=base,
    )
    publish_branch(change.branch, change.head_sha)
    change.base_sha = base
    change.files_changed = sorted(changes)
    change.checks_state = ChangeRequest.Checks.PENDING
    change.save()
    record_audit(
        actor=acting_user,
        action="change.update_branch",
        target=change,
        tenant_slug=change.tenant_slug,
        diff={"base": [None, base[:12]], "head": [None, change.head_sha[:12]]},
    )
    _schedule_checks(change, acting_user)
    return change


def open_tenant_change(
    *,
    acting_user: Any,
    tenant: TenantSpec,
    fleet: FleetSpec,
    title: str,
    kind: str,
    requested_by: Any = None,
    description: str = "",
    allow_overcommit: bool = False,
    run_checks: bool = True,
    scope: list[str] | None = None,
    close_action: str = "",
) -> ChangeRequest:
    """Open a change that makes main hold ``tenant`` exactly as specified; ``scope``: what of
    the tenant it was asked to touch (``gitops.checks.scope``)."""
    return open_change(
        acting_user=acting_user,
        title=title,
        changes=tenant_changes(tenant, fleet),
        kind=kind,
        tenant_slug=tenant.slug,
        description=description,
        requested_by=requested_by,
        allow_overcommit=allow_overcommit,
        run_checks=run_checks,
        scope=scope,
        close_action=close_action,
    )


def change_scopes(changes: Iterable[ChangeRequest]) -> dict[str, set[str]]:
    """What the changes may touch, by tenant (``gitops.checks.scope``): each change's scope
    under its tenant; a change that names none may touch its tenant's whole directory, or,
    without a tenant (a platform change), every tenant's."""
    scopes: dict[str, set[str]] = {}
    for change in changes:
        key = change.tenant_slug or ANY_TENANT
        if change.scope is None:
            scopes.setdefault(key, set()).add(EVERYTHING)
        else:
            scopes.setdefault(key, set()).update(change.scope)
    return scopes


# How long forge delivery ids are kept to recognise a replay (see ForgeDelivery).
FORGE_DELIVERY_RETENTION = timedelta(days=30)


@dataclass(frozen=True)
class ForgeEventOutcome:
    """What a verified forge webhook did: ``applied`` to ``change`` (or found it no longer
    open: nothing to do), ``duplicate`` of a delivery already handled, or ``ignored`` because
    it is not about one of the portal's change requests, as ``reason`` says."""

    status: Literal["applied", "duplicate", "ignored"]
    change: ChangeRequest | None = None
    reason: str = ""


@transaction.atomic
def do_record_forge_event(event: WebhookEvent, *, forge: str) -> ForgeEventOutcome:
    """Apply a verified forge webhook: the pull request ``event.number`` was merged or closed.

    The provider has checked that it is the configured repository's own pull request; here it
    must target the fleet's main branch from the branch of the change whose pull request it is,
    and its delivery id must be new. The id is stored in this transaction, with the change
    locked, so of two copies arriving at once one is applied and the other is a duplicate, and
    a delivery that fails half-way is not remembered: the forge's retry is applied in full.

    On a merge the portal's main is brought level with the forge's (fetch, fast-forward) so
    that what it shows and checks is what Flux applies.
    """
    main = settings.GITOPS_MAIN_BRANCH
    if event.base_branch != main:
        return _ignored(event, f"it targets the branch {event.base_branch!r}, not {main!r}")
    if not CHANGE_BRANCH.fullmatch(event.head_branch):
        return _ignored(
            event, f"its branch {event.head_branch!r} is not one of the portal's change branches"
        )
    change = ChangeRequest.objects.select_for_update().filter(forge_number=event.number).first()
    if change is None:
        return _ignored(event, "no change request has this pull request")
    if change.branch != event.head_branch:
        return _ignored(
            event,
            f"its branch {event.head_branch!r} is not {change.branch!r}, the branch of change"
            f" #{change.pk}",
        )
    # Only now: an ignored delivery (one that came before its pull request's number was
    # stored, say) must still count when the forge sends it again.
    try:
        with transaction.atomic():
            ForgeDelivery.objects.create(
                forge=forge, delivery=event.delivery, number=event.number, kind=event.kind
            )
    except IntegrityError:
        logger.info("%s delivery %s was handled before: ignored", forge, event.delivery)
        return ForgeEventOutcome("duplicate", change)
    if not change.is_open:
        return ForgeEventOutcome("applied", change)
    if event.kind == "merged":
        result = repository().sync_with_remote(
            settings.GITOPS_REMOTE_URL,
            branch=main,
            username=settings.GITOPS_REMOTE_USERNAME,
            password=settings.GITOPS_REMOTE_PASSWORD,
        )
        change.status = ChangeRequest.Status.MERGED
        change.merge_sha = event.merge_sha or result.tip or ""
        change.merged_at = timezone.now()
        change.apply_state = ChangeRequest.Apply.PENDING
        action = "change.forge_merge"
        enqueue(
            "gitops.project_tenants",
            title=f"Project main for change #{change.pk}",
            slugs=sorted(
                {p.split("/")[1] for p in change.files_changed if p.startswith("tenants/")}
                - {"kustomization.yaml"}
            ),
        )
    else:
        change.status = ChangeRequest.Status.CLOSED
        change.closed_at = timezone.now()
        action = "change.forge_close"
    change.save()
    record_audit(
        actor=None,
        action=action,
        target=change,
        tenant_slug=change.tenant_slug,
        diff={
            "status": ["open", change.status],
            "forge": [None, change.forge_url],
            "delivery": [None, event.delivery],
        },
    )
    return ForgeEventOutcome("applied", change)


def _ignored(event: WebhookEvent, why: str) -> ForgeEventOutcome:
    reason = f"pull request #{event.number} is not the portal's: {why}"
    logger.warning("forge webhook %s ignored: %s", event.delivery, reason)
    return ForgeEventOutcome("ignored", reason=reason)


def prune_forge_deliveries() -> int:
    """Forget delivery ids older than ``FORGE_DELIVERY_RETENTION``; returns how many."""
    cutoff = timezone.now() - FORGE_DELIVERY_RETENTION
    deleted, _ = ForgeDelivery.objects.filter(received_at__lt=cutoff).delete()
    return deleted


INVENTORY_TITLE = "Update the fleet's flavors and topology from the live inventory"


@transaction.atomic
def do_record_inventory(
    flavors: tuple[Flavor, ...], topology_levels: tuple[str, ...], *, acting_user: Any = None
) -> ChangeRequest | None:
    """Store what the live inventory counted and open a pull request when ``infrastructure/``
    (ResourceFlavors, Topology) no longer matches it. Returns that change, if any.

    GPU counts alone change no manifest (Kueue's flavors name node labels, not sizes): they are
    stored, audited, and used by the capacity checks at once. An open inventory change that no
    longer matches is closed as superseded, so there is at most one.
    """
    wanted_flavors = [flavor_mapping(f) for f in flavors]
    row = FleetInventory.objects.select_for_update().order_by("-pk").first()
    before = (row.flavors, row.topology_levels) if row is not None else None
    if before != (wanted_flavors, list(topology_levels)):
        if row is not None:
            FleetInventory.objects.exclude(pk=row.pk).delete()
        row = row or FleetInventory()
        row.flavors = wanted_flavors
        row.topology_levels = list(topology_levels)
        row.save()
        record_audit(
            actor=acting_user,
            action="fleet.inventory",
            target=row,
            diff={
                "flavors": [
                    _flavor_summary(before[0]) if before else None,
                    _flavor_summary(wanted_flavors),
                ],
                "topology": [before[1] if before else None, list(topology_levels)],
            },
        )
    fleet = with_inventory(base_fleet())
    repo = repository()
    base = ensure_bootstrapped(fleet)
    changes = {
        path: data
        for path, data in render_infrastructure(fleet).items()
        if repo.read_file(base, path) != data
    }
    open_changes = ChangeRequest.objects.select_for_update().filter(
        status=ChangeRequest.Status.OPEN, kind=ChangeRequest.Kind.PLATFORM, title=INVENTORY_TITLE
    )
    for existing in open_changes:
        theirs = {p: repo.read_file(existing.head_sha, p) for p in existing.files_changed}
        if changes and theirs == changes and existing.base_sha == base:
            return existing
        do_close(existing, acting_user=acting_user, reason="Superseded by a newer inventory.")
    if not changes:
        return None
    return open_change(
        acting_user=acting_user,
        title=INVENTORY_TITLE,
        scope=[],  # the platform's files: no tenant's resources
        changes=changes,
        kind=ChangeRequest.Kind.PLATFORM,
        description="The live inventory now has: "
        + "; ".join(_flavor_summary(wanted_flavors))
        + f". Topology levels: {', '.join(topology_levels)}.",
    )


def _flavor_summary(flavors: list[dict[str, Any]]) -> list[str]:
    out = []
    for flavor in flavors:
        extra = ""
        if flavor.get("mig_profiles"):
            extra = " (" + ", ".join(f"{n}x {p}" for p, n in flavor["mig_profiles"].items()) + ")"
        out.append(
            f"{flavor['name']}: {flavor['gpus']} {flavor['product']} {flavor['mode']}{extra}"
        )
    return out
