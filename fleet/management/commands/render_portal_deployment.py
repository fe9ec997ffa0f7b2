"""Render the portal's own deployment: files in a directory for the first install (no portal
runs yet), or a change request on the fleet repository (``--commit``) once one does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.forms import parse_egress
from fleet.services import do_propose_portal_deployment
from gitops.fleet import configured_fleet
from gitops.render import render_portal_deployment
from gitops.specs import PortalDeploySpec, PortalEgress, SpecError


def _egress(value: str) -> PortalEgress:
    try:
        return parse_egress(value)
    except ValueError as exc:
        raise CommandError(f"--egress {exc}") from exc


class Command(BaseCommand):
    help = (
        "Render the portal's own deployment (web, Celery workers, one beat, the migration Job, "
        "configuration, NetworkPolicies, PodDisruptionBudgets, ServiceMonitor) for the "
        "configured fleet: into --out DIR, or as a change request with --commit."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--image", required=True, help="registry/repository:tag of the portal")
        parser.add_argument(
            "--hostname",
            dest="hostnames",
            action="append",
            required=True,
            help="a hostname the portal is served on (repeat for more; the first is canonical)",
        )
        parser.add_argument("--base-url", help="PORTAL_BASE_URL (default https://<hostname>)")
        parser.add_argument("--web-replicas", type=int, default=2)
        parser.add_argument("--worker-replicas", type=int, default=2)
        parser.add_argument(
            "--env-secret", default="portal-env", help="the Secret holding the portal's secrets"
        )
        parser.add_argument(
            "--external-secret-key",
            default="",
            help="fill that Secret from this remote key of the fleet's secret_store",
        )
        parser.add_argument(
            "--state-claim",
            default="",
            help="a ReadWriteMany PersistentVolumeClaim to hold var/ (the shared-volume mode)",
        )
        parser.add_argument(
            "--ingress-namespace",
            default="",
            help="where HTTP traffic to the portal comes from (default: the gateway's proxies)",
        )
        parser.add_argument(
            "--egress",
            action="append",
            default=[],
            type=_egress,
            help="CIDR:PORT or NAMESPACE:PORT the pods may connect to (database, Redis, API "
            "server, Git remote, identity provider); repeat for more",
        )
        parser.add_argument(
            "--public-https",
            action="store_true",
            help="allow HTTPS to public addresses (outbound webhooks, a forge or identity "
            "provider on the internet)",
        )
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--out", type=Path, help="write the files under this directory")
        target.add_argument(
            "--commit",
            action="store_true",
            help="open a change request on the fleet repository instead",
        )
        parser.add_argument(
            "--as", dest="username", help="the platform admin opening the change (--commit)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        hostnames = tuple(options["hostnames"])
        spec = PortalDeploySpec(
            image=options["image"],
            base_url=options["base_url"] or f"https://{hostnames[0]}",
            hostnames=hostnames,
            web_replicas=options["web_replicas"],
            worker_replicas=options["worker_replicas"],
            secret_name=options["env_secret"],
            external_secret_key=options["external_secret_key"],
            state_claim=options["state_claim"],
            ingress_namespace=options["ingress_namespace"],
            egress=tuple(options["egress"]),
            public_https=options["public_https"],
        )
        fleet = configured_fleet()
        if options["commit"]:
            self._commit(spec, options["username"])
            return
        try:
            files = render_portal_deployment(spec, fleet)
        except SpecError as exc:
            raise CommandError(
                "; ".join(f"{field}: {message}" for field, message in sorted(exc.errors.items()))
            ) from exc
        out: Path = options["out"]
        if out.exists() and not out.is_dir():
            raise CommandError(f"{out} exists and is not a directory.")
        for path, data in files.items():
            target = out / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        self.stdout.write(f"Wrote {len(files)} files under {out}.")

    def _commit(self, spec: PortalDeploySpec, username: str | None) -> None:
        if not username:
            raise CommandError("--commit needs --as <platform admin>.")
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user '{username}'.")
        try:
            change = do_propose_portal_deployment(spec, acting_user=user)
        except (PermissionDenied, ValidationError) as exc:
            message = "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
            raise CommandError(message) from exc
        self.stdout.write(f"Opened change {change.pk} on {change.branch}.")
