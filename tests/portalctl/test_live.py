"""The installed ``portalctl`` against a live portal (pytest-django's live server, a real
token): login, diff, apply, get, a round trip through standard input, a bad document,
``status --watch`` while the request is approved, merged and applied, and delete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.tokens import do_create_token
from catalog import services
from catalog.models import Resource, ResourceRequest
from gitops import services as gitops
from gitops.models import ChangeRequest
from tenants.specs import tenant_spec

pytestmark = pytest.mark.django_db(transaction=True)

PORTALCTL = Path(sys.executable).parent / "portalctl"
SHARE = {
    "apiVersion": "portal.ai-factory.dev/v1",
    "kind": "GpuShare",
    "metadata": {"tenant": "alpha", "name": "train"},
    "spec": {"flavor": "h200", "kind": "whole", "count": 2},
}


@pytest.fixture
def portalctl(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    assert PORTALCTL.exists(), "portalctl is installed with the package (pip install -e .)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_")}
    env["PORTALCTL_CONFIG"] = str(tmp_path / "portalctl.json")

    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(PORTALCTL), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    run.env = env  # type: ignore[attr-defined]
    return run


def test_portalctl_drives_a_gpu_share_from_a_file_to_ready(
    live_server: Any,
    world: dict[str, Any],
    merged_change: Callable[..., Any],
    portalctl: Any,
    tmp_path: Path,
) -> None:
    merged_change(tenant_spec(world["alpha"]))
    _, text = do_create_token(
        acting_user=world["bob"],
        owner=world["bob"],
        name="cli",
        scope="request",
        expires_in_days=1,
    )
    login = portalctl("login", "--url", live_server.url, "--token-stdin", stdin=text + "\n")
    assert login.returncode == 0, login.stderr
    assert "1 tenant(s) visible" in login.stdout

    folder = tmp_path / "portal"
    folder.mkdir()
    (folder / "share.yaml").write_text(yaml.safe_dump(SHARE))
    diff = portalctl("diff", "-f", str(folder))
    assert diff.returncode == 1, diff.stderr
    assert "~ GpuShare alpha/train: would be created" in diff.stdout
    assert Resource.objects.count() == 0  # a diff asks for nothing

    applied = portalctl("apply", "-f", str(folder))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "created" in applied.stdout
    request = ResourceRequest.objects.get()
    assert (request.state, request.requested_by) == ("submitted", world["bob"])
    again = portalctl("apply", "-f", str(folder / "share.yaml"))
    assert again.returncode == 0 and "unchanged" in again.stdout

    listed = portalctl("get", "gpushares", "--tenant", "alpha", "-o", "json")
    [document] = json.loads(listed.stdout)
    assert document["status"]["request"]["state"] == "submitted"
    table = portalctl("get", "gpushares", "--tenant", "alpha").stdout.splitlines()
    assert table[0].split() == ["TENANT", "KIND", "NAME", "STATE", "REQUEST", "READY"]
    assert table[1].split()[:4] == ["alpha", "GpuShare", "train", "pending"]
    # What get prints applies again as unchanged (its status is ignored).
    exported = portalctl("get", "gpushares", "train", "-t", "alpha", "-o", "yaml").stdout
    round_trip = portalctl("apply", "-f", "-", stdin=exported)
    assert round_trip.returncode == 0 and "unchanged" in round_trip.stdout

    bad = {**SHARE, "metadata": {"tenant": "alpha", "name": "other"}, "spec": {"gpuz": 1}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    refused = portalctl("apply", "-f", str(tmp_path / "bad.yaml"))
    assert refused.returncode == 1
    assert "spec.gpuz: Unknown field." in refused.stdout
    assert Resource.objects.count() == 1

    watch = subprocess.Popen(
        [
            str(PORTALCTL),
            "status",
            "gpushares",
            "train",
            "-t",
            "alpha",
            "--watch",
            "--interval",
            "0.2",
            "--timeout",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=portalctl.env,
    )
    try:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # its first look (submitted) before anything moves
        request = services.do_approve(request, acting_user=world["pam"])
        assert request.state == "pr_open", request.error
        gitops.do_merge(request.change, acting_user=world["pam"])
        services.advance_requests()
        # Flux applied it (what the fleet sync records): a share is ready once applied.
        ChangeRequest.objects.filter(pk=request.change_id).update(apply_state="applied")
        services.advance_requests()
        out, err = watch.communicate(timeout=60)
    finally:
        watch.kill()
    assert watch.returncode == 0, first + out + err
    lines = (first + out).splitlines()
    assert "request: submitted" in lines[0]
    assert "ready: ready" in lines[-1] and "request: -" in lines[-1]
    assert ResourceRequest.objects.get(pk=request.pk).state == "ready"

    deleted = portalctl("delete", "-f", str(folder / "share.yaml"))
    assert deleted.returncode == 0, deleted.stderr
    assert "decommission requested" in deleted.stdout
    assert ResourceRequest.objects.filter(action="decommission", state="submitted").count() == 1


def test_portalctl_says_why_a_token_is_refused(
    live_server: Any, world: dict[str, Any], portalctl: Any
) -> None:
    bad = portalctl("login", "--url", live_server.url, "--token", "afp_00000000_nope")
    assert bad.returncode == 1
    assert "401" in bad.stderr
    assert not Path(portalctl.env["PORTALCTL_CONFIG"]).exists()  # nothing saved
