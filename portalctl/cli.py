"""``portalctl``: log in with a token, get, apply, diff, delete and watch the portal's
declarative resources (tenant clusters, GPU shares, model endpoints), read tenants and
requests, and run, list, read the logs of and cancel batch jobs.

Exit codes: 0 done; 1 the portal refused something (a document with an error or a conflict,
a request that failed; for ``diff``: there are differences, as ``kubectl diff``); 2 bad
usage or the portal could not be reached; 3 ``status --watch`` timed out.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from portalctl import config
from portalctl.client import ApiError, Client
from portalctl.output import Column, dig, render

# What a user may type for each kind, and its URL segment and document kind.
KINDS: dict[str, tuple[str, str]] = {}
for segment, kind, aliases in (
    ("clusters", "TenantCluster", ("cluster", "tenantcluster", "tenantclusters", "vcluster")),
    ("gpushares", "GpuShare", ("gpushare", "gpu-share", "gpu-shares", "share", "shares")),
    ("endpoints", "ModelEndpoint", ("endpoint", "modelendpoint", "modelendpoints")),
):
    for alias in (segment, kind.lower(), *aliases):
        KINDS[alias] = (segment, kind)
SEGMENT_OF_KIND = {kind: segment for segment, kind in KINDS.values()}

DOCUMENT_COLUMNS: list[Column] = [
    ("TENANT", lambda d: dig(d, "metadata", "tenant")),
    ("KIND", lambda d: dig(d, "kind")),
    ("NAME", lambda d: dig(d, "metadata", "name")),
    ("STATE", lambda d: dig(d, "status", "state")),
    ("REQUEST", lambda d: _request_text(dig(d, "status", "request"))),
    ("READY", lambda d: dig(d, "status", "readiness", "state")),
]
RESULT_COLUMNS: list[Column] = [
    ("#", lambda r: dig(r, "index")),
    ("TENANT", lambda r: dig(r, "tenant")),
    ("KIND", lambda r: dig(r, "kind")),
    ("NAME", lambda r: dig(r, "name")),
    ("OUTCOME", lambda r: dig(r, "outcome")),
    ("REQUEST", lambda r: dig(r, "request")),
    ("MESSAGE", lambda r: _messages(r)),
]
TENANT_COLUMNS: list[Column] = [
    ("SLUG", lambda t: dig(t, "slug")),
    ("NAME", lambda t: dig(t, "display_name")),
    ("TRUST", lambda t: dig(t, "trust_level")),
    ("ROLE", lambda t: dig(t, "role")),
]
REQUEST_COLUMNS: list[Column] = [
    ("ID", lambda r: dig(r, "id")),
    ("TENANT", lambda r: dig(r, "tenant")),
    ("ACTION", lambda r: dig(r, "action")),
    ("KIND", lambda r: dig(r, "kind")),
    ("NAME", lambda r: dig(r, "name")),
    ("STATE", lambda r: dig(r, "state")),
]
JOB_COLUMNS: list[Column] = [
    ("TENANT", lambda j: dig(j, "tenant")),
    ("NAME", lambda j: dig(j, "name")),
    ("KIND", lambda j: dig(j, "kind")),
    ("STATE", lambda j: dig(j, "state", "state")),
    ("POSITION", lambda j: dig(j, "state", "position")),
    ("SUBMITTED BY", lambda j: dig(j, "submitted_by")),
    ("DETAIL", lambda j: dig(j, "state", "detail")),
]
JOB_DOCUMENT = "BatchJob"
TERMINAL_REQUEST_STATES = {"ready", "failed", "rejected", "cancelled", "decommissioned"}


def _request_text(request: Any) -> str:
    if isinstance(request, dict):
        return f"#{request.get('id')} {request.get('state', '')}".strip()
    return str(request or "")


def _messages(result: dict[str, Any]) -> str:
    errors = result.get("errors") or {}
    if isinstance(errors, dict) and errors:
        return "; ".join(
            f"{where}: {message}" if where else str(message)
            for where, messages in errors.items()
            for message in (messages if isinstance(messages, list) else [messages])
        )
    return str(result.get("detail") or result.get("message") or "")


def _kind(text: str) -> tuple[str, str]:
    try:
        return KINDS[text.lower()]
    except KeyError:
        known = ", ".join(sorted({segment for segment, _ in KINDS.values()}))
        raise SystemExit(f"portalctl: unknown resource {text!r} (one of {known})") from None


def _tenant(args: argparse.Namespace) -> str:
    tenant = args.tenant or os.environ.get("PORTAL_TENANT", "")
    if not tenant:
        raise SystemExit("portalctl: say which tenant with --tenant (or PORTAL_TENANT)")
    return str(tenant)


def _read(source: str) -> bytes:
    """A file's bytes, standard input's (``-``), or a folder's ``*.yaml``/``*.yml`` files in
    name order as one stream of documents."""
    if source == "-":
        return sys.stdin.buffer.read()
    where = Path(source)
    try:
        if where.is_dir():
            files = sorted(p for p in where.iterdir() if p.suffix in (".yaml", ".yml"))
            return b"\n---\n".join(p.read_bytes() for p in files)
        return where.read_bytes()
    except OSError as exc:
        raise SystemExit(f"portalctl: cannot read {source}: {exc.strerror}") from None


def _client() -> Client:
    try:
        settings = config.load()
    except config.ConfigError as exc:
        raise SystemExit(f"portalctl: {exc}") from None
    return Client(settings.url, settings.token)


def cmd_login(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get("PORTAL_TOKEN", "")
    if args.token_stdin:
        token = sys.stdin.readline().strip()
    if not token:
        token = getpass.getpass("API token: ").strip()
    client = Client(args.url, token)
    tenants = list(client.items("/tenants/"))
    where = config.save(config.Config(args.url.rstrip("/"), token))
    print(f"Logged in to {args.url}: {len(tenants)} tenant(s) visible. Saved to {where}.")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    client = _client()
    what = args.resource.lower()
    if what in ("tenants", "tenant"):
        path = f"/tenants/{args.name}/" if args.name else "/tenants/"
        data: Any = client.get(path) if args.name else list(client.items(path))
        print(render(data, args.output, TENANT_COLUMNS))
        return 0
    if what in ("requests", "request"):
        if args.name:
            data = client.get(f"/requests/{args.name}/")
        else:
            params = {"tenant": args.tenant} if args.tenant else None
            data = list(client.items("/requests/", params))
        print(render(data, args.output, REQUEST_COLUMNS))
        return 0
    if what in ("jobs", "job", "batchjobs", "batchjob"):
        data = _jobs(client, args)
        print(render(data, args.output, JOB_COLUMNS))
        return 0
    segment, _ = _kind(what)
    base = f"/tenants/{_tenant(args)}/{segment}/"
    data = client.get(f"{base}{args.name}/") if args.name else list(client.items(base))
    print(render(data, args.output, DOCUMENT_COLUMNS))
    return 0


def _jobs(client: Client, args: argparse.Namespace) -> Any:
    """One job, a tenant's jobs, or without a tenant every visible tenant's."""
    tenant = args.tenant or os.environ.get("PORTAL_TENANT", "")
    if args.name:
        return client.get(f"/tenants/{_tenant(args)}/jobs/{args.name}/")
    slugs = [tenant] if tenant else [str(t["slug"]) for t in client.items("/tenants/")]
    return [job for slug in slugs for job in client.items(f"/tenants/{slug}/jobs/")]


def cmd_run(args: argparse.Namespace) -> int:
    """Submit the BatchJob documents of a file: each to its tenant's jobs, as it is."""
    client = _client()
    status = 0
    for document in _documents(_read(args.filename)):
        if document.get("kind") != JOB_DOCUMENT:
            raise SystemExit(f"portalctl: run takes kind {JOB_DOCUMENT} documents only")
        meta = document.get("metadata") or {}
        tenant = str(meta.get("tenant") or _tenant(args))
        name = str(meta.get("name", ""))
        body = {"name": name, **(document.get("spec") or {})}
        try:
            job = client.request("POST", f"/tenants/{tenant}/jobs/", json=body)
        except ApiError as exc:
            print(f"job {tenant}/{name}: {exc}", file=sys.stderr)
            status = 1
            continue
        if args.output == "table":
            print(f"{job.get('kind')} {tenant}/{name} submitted (uid {job.get('uid')}).")
        else:
            print(render(job, args.output, JOB_COLUMNS))
    return status


def cmd_logs(args: argparse.Namespace) -> int:
    client = _client()
    answer = client.get(f"/tenants/{_tenant(args)}/jobs/{args.name}/logs/")
    if answer.get("error"):
        print(f"portalctl: {answer['error']}", file=sys.stderr)
        return 1
    pods = answer.get("pods") or []
    if not pods:
        print("No pods yet (waiting for Kueue to admit the job), or they are gone.")
    for pod in pods:
        if len(pods) > 1:
            print(f"==> {pod.get('pod')} ({pod.get('phase') or '-'}) <==")
        if pod.get("error"):
            print(f"portalctl: {pod['error']}", file=sys.stderr)
        else:
            sys.stdout.write(str(pod.get("text") or ""))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    client = _client()
    tenant = _tenant(args)
    job = client.request("DELETE", f"/tenants/{tenant}/jobs/{args.name}/")
    print(f"{job.get('kind')} {tenant}/{args.name} cancelled.")
    return 0


def _apply(client: Client, body: bytes, dry_run: bool) -> dict[str, Any]:
    params = {"dry_run": "true"} if dry_run else None
    report = client.request(
        "POST", "/apply/", params=params, data=body, content_type="application/yaml"
    )
    return report if isinstance(report, dict) else {"results": report or []}


FAILED_OUTCOMES = {"error", "conflict"}


def cmd_apply(args: argparse.Namespace) -> int:
    client = _client()
    report = _apply(client, _read(args.filename), dry_run=args.dry_run)
    results = report.get("results", [])
    print(render(report if args.output != "table" else results, args.output, RESULT_COLUMNS))
    return 1 if any(r.get("outcome") in FAILED_OUTCOMES for r in results) else 0


def _diff_lines(result: dict[str, Any]) -> list[str]:
    diff = result.get("diff") or {}
    if isinstance(diff, dict):
        lines = []
        for where, change in diff.items():
            if isinstance(change, dict):
                old, new = change.get("old"), change.get("new")
            elif isinstance(change, list | tuple) and len(change) == 2:
                old, new = change
            else:
                old, new = None, change
            lines.append(f"  {where}: {old!r} -> {new!r}")
        return lines
    return [f"  {line}" for line in str(diff).splitlines()]


def _cost_lines(result: dict[str, Any]) -> list[str]:
    """What the change costs a month at current prices (the server's figure), and any GPU
    model it could not price."""
    cost = result.get("cost")
    if not isinstance(cost, dict) or cost.get("change_per_month") is None:
        return []
    change, currency = str(cost["change_per_month"]), cost.get("currency", "")
    shown = f"saves {change.lstrip('-')}" if change.startswith("-") else f"+{change}"
    note = "" if cost.get("billed_directly") else " (use of the tenant's shares)"
    lines = [f"  cost: {shown} {currency} a month at current prices{note}"]
    for side in ("after", "before"):
        estimate = cost.get(side) or {}
        lines += [f"  ! {sentence}" for sentence in estimate.get("unpriced", [])]
    return list(dict.fromkeys(lines))


def cmd_diff(args: argparse.Namespace) -> int:
    client = _client()
    results = _apply(client, _read(args.filename), dry_run=True).get("results", [])
    changed = failed = False
    for result in results:
        outcome = result.get("outcome", "")
        label = f"{result.get('kind')} {result.get('tenant')}/{result.get('name')}"
        if outcome in FAILED_OUTCOMES:
            failed = True
            print(f"! {label}: {outcome}: {_messages(result)}")
        elif outcome != "unchanged":
            changed = True
            print(f"~ {label}: would be {outcome}")
            for line in _diff_lines(result) + _cost_lines(result):
                print(line)
    if failed:
        return 2
    if not changed:
        print("No differences.")
    return 1 if changed else 0


def _documents(body: bytes) -> list[dict[str, Any]]:
    try:
        loaded = [d for d in yaml.safe_load_all(body) if d is not None]
    except yaml.YAMLError as exc:
        raise SystemExit(f"portalctl: not YAML: {exc}") from None
    if not all(isinstance(d, dict) for d in loaded):
        raise SystemExit("portalctl: every document must be a mapping")
    return loaded


def cmd_delete(args: argparse.Namespace) -> int:
    client = _client()
    targets: list[tuple[str, str, str]] = []
    if args.filename:
        for document in _documents(_read(args.filename)):
            kind = str(document.get("kind", ""))
            if kind not in SEGMENT_OF_KIND:
                raise SystemExit(f"portalctl: unknown kind {kind!r} in {args.filename}")
            meta = document.get("metadata") or {}
            targets.append(
                (str(meta.get("tenant", "")), SEGMENT_OF_KIND[kind], str(meta.get("name", "")))
            )
    else:
        if not (args.resource and args.name):
            raise SystemExit("portalctl: delete RESOURCE NAME --tenant T, or delete -f FILE")
        segment, _ = _kind(args.resource)
        targets.append((_tenant(args), segment, args.name))
    status = 0
    for tenant, segment, name in targets:
        try:
            answer = client.request("DELETE", f"/tenants/{tenant}/{segment}/{name}/")
        except ApiError as exc:
            print(f"{segment}/{name} ({tenant}): {exc}", file=sys.stderr)
            status = 1
            continue
        request = dig(answer, "status", "request") or dig(answer, "request")
        print(
            f"{segment}/{name} ({tenant}): decommission requested {_request_text(request)}".rstrip()
        )
    return status


def _state(document: dict[str, Any]) -> tuple[str, str, str]:
    """(state of the request in flight, readiness in the cluster, message) of a document's
    status; a request's error wins the message."""
    request = dig(document, "status", "request")
    request_state = str(request.get("state", "")) if isinstance(request, dict) else ""
    message = (request.get("error") if isinstance(request, dict) else "") or dig(
        document, "status", "readiness", "message"
    )
    return request_state, str(dig(document, "status", "readiness", "state")), str(message)


def cmd_status(args: argparse.Namespace) -> int:
    client = _client()
    segment, _ = _kind(args.resource)
    path = f"/tenants/{_tenant(args)}/{segment}/{args.name}/"
    deadline = time.monotonic() + args.timeout
    last: tuple[str, str, str] | None = None
    while True:
        document = client.get(path)
        state = _state(document)
        if state != last:
            request_state, readiness, message = state
            stamp = time.strftime("%H:%M:%S")
            print(
                f"{stamp}  {dig(document, 'status', 'state') or '-'}"
                f"  request: {request_state or '-'}  ready: {readiness or '-'}"
                + (f"  {message}" if message else ""),
                flush=True,
            )
            last = state
        request_state, readiness, _ = state
        if request_state in ("failed", "rejected", "cancelled") or (
            not request_state and readiness == "failed"
        ):
            return 1
        settled = not request_state and readiness in ("ready", "")
        if not args.watch or settled or request_state in TERMINAL_REQUEST_STATES:
            return 0
        if time.monotonic() >= deadline:
            print(f"portalctl: still not ready after {args.timeout:.0f} s", file=sys.stderr)
            return 3
        time.sleep(args.interval)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="portalctl", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)

    login = sub.add_parser("login", help="store the portal's URL and an API token")
    login.add_argument("--url", required=True, help="the portal, e.g. https://portal.example")
    login.add_argument("--token", help="the token (else PORTAL_TOKEN, else asked for)")
    login.add_argument("--token-stdin", action="store_true", help="read the token from stdin")
    login.set_defaults(func=cmd_login)

    def output(p: argparse.ArgumentParser) -> None:
        p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")

    def tenant(p: argparse.ArgumentParser) -> None:
        p.add_argument("-t", "--tenant", help="the tenant's slug (else PORTAL_TENANT)")

    get = sub.add_parser("get", help="list or show resources, tenants or requests")
    get.add_argument("resource", help="clusters, gpushares, endpoints, jobs, tenants or requests")
    get.add_argument("name", nargs="?", help="one of them")
    tenant(get)
    output(get)
    get.set_defaults(func=cmd_get)

    apply = sub.add_parser("apply", help="make the portal's resources match YAML documents")
    apply.add_argument(
        "-f", "--filename", required=True, help="a file or folder of YAML documents, or -"
    )
    apply.add_argument("--dry-run", action="store_true", help="say what would happen only")
    output(apply)
    apply.set_defaults(func=cmd_apply)

    diff = sub.add_parser("diff", help="what apply would change (exit 1 when anything)")
    diff.add_argument(
        "-f", "--filename", required=True, help="a file or folder of YAML documents, or -"
    )
    diff.set_defaults(func=cmd_diff)

    delete = sub.add_parser("delete", help="ask for resources to be decommissioned")
    delete.add_argument("resource", nargs="?")
    delete.add_argument("name", nargs="?")
    delete.add_argument("-f", "--filename", help="the documents whose resources to remove")
    tenant(delete)
    delete.set_defaults(func=cmd_delete)

    run = sub.add_parser("run", help="submit the batch jobs of BatchJob documents")
    run.add_argument("-f", "--filename", required=True, help="a file of BatchJob documents, or -")
    tenant(run)
    output(run)
    run.set_defaults(func=cmd_run)

    logs = sub.add_parser("logs", help="the last lines of a batch job's pods")
    logs.add_argument("name")
    tenant(logs)
    logs.set_defaults(func=cmd_logs)

    cancel = sub.add_parser("cancel", help="cancel a batch job (its pods stop)")
    cancel.add_argument("name")
    tenant(cancel)
    cancel.set_defaults(func=cmd_cancel)

    status = sub.add_parser("status", help="a resource's request and readiness")
    status.add_argument("resource")
    status.add_argument("name")
    tenant(status)
    status.add_argument("-w", "--watch", action="store_true", help="until ready or failed")
    status.add_argument("--interval", type=float, default=2.0, help="seconds between looks")
    status.add_argument("--timeout", type=float, default=900.0, help="give up after (s)")
    status.set_defaults(func=cmd_status)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ApiError as exc:
        print(f"portalctl: {exc}", file=sys.stderr)
        return 1 if 400 <= exc.status < 500 else 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
