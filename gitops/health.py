"""Readiness checks of the Git store, registered with the portal by PORTAL_READINESS_CHECKS.

``git_store``: this replica's bare repository opens and main resolves to a readable commit.
``git_remote``: when GITOPS_REMOTE_URL is set, the remote answers a ref listing within the
readiness timeout. That answer is cached for PORTAL_READINESS_REMOTE_CACHE_SECONDS, so a
kubelet probing every few seconds on every replica does not turn into a stream of calls to
the forge.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from urllib.parse import urlsplit

from django.conf import settings

from gitops.repo import GitRepositoryError, basic_auth_env, redact
from gitops.services import repository
from portal.health import CheckResult, failed, not_configured, ok


def git_store() -> CheckResult:
    # open_or_init: a fresh install has no repository until the first change, and must be
    # ready before it (or nobody could open that change); creating the empty repository also
    # proves its volume is writable.
    repo = repository()
    main = settings.GITOPS_MAIN_BRANCH
    sha = repo.head(main)
    if sha is None:
        return ok(f"empty repository: {main} is made by the first change")
    try:
        repo.commit_message(sha)
    except GitRepositoryError as exc:
        return failed(f"{main} points at {sha[:12]}, which cannot be read: {exc}")
    return ok(f"{main} at {sha[:12]}")


_remote_lock = threading.Lock()
# url -> (monotonic time of the answer, the answer)
_remote_cache: dict[str, tuple[float, CheckResult]] = {}


def git_remote() -> CheckResult:
    url = settings.GITOPS_REMOTE_URL
    if not url:
        return not_configured("no GITOPS_REMOTE_URL: this replica's repository is the truth")
    now = time.monotonic()
    with _remote_lock:
        cached = _remote_cache.get(url)
    if cached is not None and now - cached[0] < settings.PORTAL_READINESS_REMOTE_CACHE_SECONDS:
        return cached[1]
    result = _list_main(url)
    with _remote_lock:
        _remote_cache[url] = (now, result)
    return result


def _list_main(url: str) -> CheckResult:
    """``git ls-remote`` of main: the cheapest question a remote answers (no objects move).

    The git command rather than libgit2: it takes a timeout (the process is killed), and the
    credentials go in through the environment, not the command line, so no other process on
    the machine can read them from the process list.
    """
    main = settings.GITOPS_MAIN_BRANCH
    shown = redact(url)
    timeout = settings.PORTAL_READINESS_TIMEOUT_SECONDS
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/"),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ASKPASS": "/bin/false",
    }
    if settings.GITOPS_REMOTE_PASSWORD and urlsplit(url).scheme in ("http", "https"):
        env |= basic_auth_env(settings.GITOPS_REMOTE_USERNAME, settings.GITOPS_REMOTE_PASSWORD)
    try:
        result = subprocess.run(
            ["git", "ls-remote", "--", url, f"refs/heads/{main}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return failed(f"{shown} did not answer within {timeout:g}s")
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        last = redact(lines[-1]) if lines else f"git exited {result.returncode}"
        return failed(f"{shown}: {last[:200]}")
    sha = result.stdout.split("\t", 1)[0].strip()
    if not sha:
        return ok(f"{shown} answered; it has no {main} yet")
    return ok(f"{shown} answered: {main} at {sha[:12]}")
