"""The read-only Git smart-HTTP endpoint, driven by the real git client over a live server.

Flux clones exactly like ``git clone`` does, so each test runs git against the portal: a
token-authenticated clone, a fetch of a newer commit, protocol v2, refused pushes, wrong
tokens and unknown repositories.
"""

from __future__ import annotations

import base64
import gzip
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from gitops.repo import GitRepository, Identity, RemoteError
from tests.support.processes import gunicorn, portal_env

TOKEN = "flux-read-token-0123456789"
ALICE = Identity("Alice Admin", "alice@example.com")


@pytest.fixture
def fleet(settings: Any, tmp_path: Path) -> GitRepository:
    settings.GITOPS_REPO_PATH = tmp_path / "served" / "fleet.git"
    settings.GITOPS_HTTP_TOKENS = ["another-token", TOKEN]
    repo = GitRepository.open_or_init(settings.GITOPS_REPO_PATH)
    repo.commit(
        {
            "clusters/ai-factory/tenants.yaml": b"kind: Kustomization\n",
            "tenants/alpha/quota.yaml": b"gpu: 4\n",
        },
        message="Bootstrap\n",
        author=ALICE,
        branch="main",
        expected_parent=None,
    )
    return repo


def git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    # Never prompt, and no user or system config (credential helpers) in the way.
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME="Mallory",
        GIT_AUTHOR_EMAIL="mallory@example.com",
        GIT_COMMITTER_NAME="Mallory",
        GIT_COMMITTER_EMAIL="mallory@example.com",
    )
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def url(live_server: Any, name: str = "fleet", token: str | None = TOKEN) -> str:
    host = live_server.url.removeprefix("http://")
    userinfo = f"flux:{token}@" if token is not None else ""
    return f"http://{userinfo}{host}/git/{name}.git"


def basic(token: str, user: str = "flux") -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{token}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


def test_it_clones_with_a_token(fleet: GitRepository, live_server: Any, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    result = git("clone", "-q", url(live_server), str(clone))
    assert result.returncode == 0, result.stderr
    assert (clone / "tenants/alpha/quota.yaml").read_text() == "gpu: 4\n"
    assert (clone / "clusters/ai-factory/tenants.yaml").read_text() == "kind: Kustomization\n"
    assert git("rev-parse", "HEAD", cwd=clone).stdout.strip() == fleet.head("main")


def test_it_serves_new_commits_to_a_fetch(
    fleet: GitRepository, live_server: Any, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    assert git("clone", "-q", url(live_server), str(clone)).returncode == 0
    second = fleet.commit(
        {"tenants/alpha/quota.yaml": b"gpu: 8\n", "tenants/bravo/quota.yaml": b"gpu: 1\n"},
        message="More GPUs\n",
        author=ALICE,
        branch="main",
        expected_parent=fleet.head("main"),
    )
    result = git("pull", "-q", "--ff-only", cwd=clone)
    assert result.returncode == 0, result.stderr
    assert git("rev-parse", "HEAD", cwd=clone).stdout.strip() == second
    assert (clone / "tenants/alpha/quota.yaml").read_text() == "gpu: 8\n"
    assert (clone / "tenants/bravo/quota.yaml").read_text() == "gpu: 1\n"


def test_it_speaks_protocol_v2(fleet: GitRepository, live_server: Any, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    env_trace = {"GIT_TRACE_PACKET": "1"}
    result = subprocess.run(
        ["git", "-c", "protocol.version=2", "clone", url(live_server), str(clone)],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            **env_trace,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "git< version 2" in result.stderr  # the server answered in v2
    assert "ls-refs" in result.stderr
    assert (clone / "tenants/alpha/quota.yaml").read_text() == "gpu: 4\n"


def test_it_accepts_a_bearer_token(fleet: GitRepository, live_server: Any, tmp_path: Path) -> None:
    result = git(
        "-c",
        f"http.extraHeader=Authorization: Bearer {TOKEN}",
        "clone",
        "-q",
        url(live_server, token=None),
        str(tmp_path / "clone"),
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture
def portal(fleet: GitRepository, settings: Any, tmp_path: Path) -> Iterator[str]:
    """The portal under gunicorn, the production server, serving ``fleet``; yields the
    repository's URL.

    libgit2 (pygit2) needs it: it cannot read a streamed body that ends with the connection,
    which is what Django's development server sends; gunicorn sends it chunked.
    """
    env = portal_env(
        PORTAL_VAR_DIR=str(tmp_path / "var"),
        GITOPS_REPO_PATH=str(settings.GITOPS_REPO_PATH),
        GITOPS_HTTP_TOKENS=",".join(settings.GITOPS_HTTP_TOKENS),
    )
    with gunicorn(env, log_file=tmp_path / "gunicorn.log") as url:
        yield f"{url}/git/fleet.git"


def test_it_lets_pygit2_fetch_with_credentials(
    fleet: GitRepository, portal: str, tmp_path: Path
) -> None:
    mirror = GitRepository.open_or_init(tmp_path / "mirror.git")
    mirror.fetch(portal, ["+refs/heads/main:refs/heads/main"], username="flux", password=TOKEN)
    assert mirror.head("main") == fleet.head("main")
    assert mirror.read_file("main", "tenants/alpha/quota.yaml") == b"gpu: 4\n"
    # A wrong password fails once, instead of libgit2 asking again forever.
    with pytest.raises(RemoteError, match="authentication"):
        mirror.fetch(portal, ["+refs/heads/main:refs/heads/main"], username="flux", password="nope")


def test_it_rejects_a_wrong_or_missing_token(
    fleet: GitRepository, live_server: Any, tmp_path: Path
) -> None:
    wrong = git("clone", "-q", url(live_server, token="wrong"), str(tmp_path / "a"))
    assert wrong.returncode != 0
    assert "Authentication failed" in wrong.stderr
    missing = git("clone", "-q", url(live_server, token=None), str(tmp_path / "b"))
    assert missing.returncode != 0
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_it_answers_401_with_a_basic_challenge(fleet: GitRepository, client: Client) -> None:
    path = "/git/fleet.git/info/refs?service=git-upload-pack"
    for headers in (
        {},
        basic("wrong"),
        {"Authorization": "Bearer wrong"},
        {"Authorization": "Basic not-base64!"},
        basic(""),
    ):
        response = client.get(path, headers=headers)
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Basic realm="fleet"'
    response = client.get(path, headers=basic(TOKEN, user="anyone"))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-git-upload-pack-advertisement"
    assert response.content.startswith(b"001e# service=git-upload-pack\n0000")
    assert f"{fleet.head('main')} refs/heads/main".encode() in response.content
    assert response["Cache-Control"].startswith("no-cache")


def test_it_refuses_push(fleet: GitRepository, live_server: Any, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    assert git("clone", "-q", url(live_server), str(clone)).returncode == 0
    (clone / "tenants/alpha/quota.yaml").write_text("gpu: 64\n")
    assert git("commit", "-qam", "Take all GPUs", cwd=clone).returncode == 0
    result = git("push", "origin", "HEAD:main", cwd=clone)
    assert result.returncode != 0
    assert "403" in result.stderr
    assert fleet.read_file("main", "tenants/alpha/quota.yaml") == b"gpu: 4\n"


def test_it_refuses_receive_pack_requests(fleet: GitRepository, client: Client) -> None:
    info = client.get("/git/fleet.git/info/refs?service=git-receive-pack", headers=basic(TOKEN))
    assert info.status_code == 403
    post = client.post(
        "/git/fleet.git/git-receive-pack",
        b"0000",
        content_type="application/x-git-receive-pack-request",
        headers=basic(TOKEN),
    )
    assert post.status_code == 403
    dumb = client.get("/git/fleet.git/info/refs", headers=basic(TOKEN))
    assert dumb.status_code == 403


def test_it_serves_only_the_configured_repository(
    fleet: GitRepository, client: Client, live_server: Any, tmp_path: Path
) -> None:
    for name in ("other", "fleet.git", ".."):
        response = client.get(
            f"/git/{name}.git/info/refs?service=git-upload-pack", headers=basic(TOKEN)
        )
        assert response.status_code == 404
    result = git("clone", "-q", url(live_server, name="other"), str(tmp_path / "clone"))
    assert result.returncode != 0
    assert "404" in result.stderr or "not found" in result.stderr


def _upload_pack_request(sha: str) -> bytes:
    def pkt(line: str) -> bytes:
        return b"%04x" % (len(line) + 4) + line.encode()

    return pkt(f"want {sha} side-band-64k ofs-delta\n") + b"0000" + pkt("done\n")


@pytest.mark.parametrize("encoding", ["", "gzip"])
def test_it_streams_upload_pack_and_inflates_gzip(
    fleet: GitRepository, client: Client, encoding: str
) -> None:
    body = _upload_pack_request(str(fleet.head("main")))
    headers = basic(TOKEN)
    if encoding:
        body = gzip.compress(body)
        headers["Content-Encoding"] = encoding
    response = client.post(
        "/git/fleet.git/git-upload-pack",
        body,
        content_type="application/x-git-upload-pack-request",
        headers=headers,
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-git-upload-pack-result"
    content = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    assert content.startswith(b"0008NAK\n")
    assert b"PACK" in content


def test_it_needs_the_upload_pack_content_type(fleet: GitRepository, client: Client) -> None:
    response = client.post(
        "/git/fleet.git/git-upload-pack", b"0000", content_type="text/plain", headers=basic(TOKEN)
    )
    assert response.status_code == 415


# --- bounds: request size and git's running time ----------------------------------------------


class Spawned:
    """Every process the portal starts during a test (a spy on ``subprocess.Popen``); with
    ``instead`` set, that command runs in place of what the portal asked for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.instead: list[str] | None = None
        real = subprocess.Popen
        spawned = self

        def spy(args: Any, *rest: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
            process = real(spawned.instead or args, *rest, **kwargs)
            spawned.processes.append(process)
            return process

        monkeypatch.setattr(subprocess, "Popen", spy)

    def left_running(self) -> list[subprocess.Popen[bytes]]:
        return [process for process in self.processes if process.poll() is None]


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spawned]:
    spy = Spawned(monkeypatch)
    yield spy
    for process in spy.left_running():
        process.kill()
        process.wait()


def test_an_oversize_body_gets_413_without_running_git(
    fleet: GitRepository, client: Client, settings: Any, spawned: Spawned
) -> None:
    settings.GITOPS_HTTP_MAX_BODY_BYTES = 1024
    fits = _upload_pack_request(str(fleet.head("main")))
    too_big = fits + b"0000" * 300
    response = client.post(
        "/git/fleet.git/git-upload-pack",
        too_big,
        content_type="application/x-git-upload-pack-request",
        headers=basic(TOKEN),
    )
    assert response.status_code == 413
    assert b"1024 bytes" in response.content
    # Small when sent, too big once inflated: the limit is on what git would read.
    bomb = gzip.compress(fits + b"0" * 500_000)
    assert len(bomb) < 1024
    response = client.post(
        "/git/fleet.git/git-upload-pack",
        bomb,
        content_type="application/x-git-upload-pack-request",
        headers={**basic(TOKEN), "Content-Encoding": "gzip"},
    )
    assert response.status_code == 413
    assert spawned.processes == []
    # Within the limit, git runs as before.
    response = client.post(
        "/git/fleet.git/git-upload-pack",
        fits,
        content_type="application/x-git-upload-pack-request",
        headers=basic(TOKEN),
    )
    assert response.status_code == 200
    assert b"PACK" in b"".join(response.streaming_content)  # type: ignore[attr-defined]
    assert len(spawned.processes) == 1


@pytest.mark.parametrize("step", ["info_refs", "upload_pack"])
def test_a_git_that_runs_too_long_is_killed_with_a_504(
    fleet: GitRepository, client: Client, settings: Any, spawned: Spawned, step: str
) -> None:
    settings.GITOPS_HTTP_TIMEOUT_SECONDS = 0.5
    spawned.instead = ["sleep", "5"]  # a git that hangs
    if step == "info_refs":
        response = client.get(
            "/git/fleet.git/info/refs?service=git-upload-pack", headers=basic(TOKEN)
        )
    else:
        response = client.post(
            "/git/fleet.git/git-upload-pack",
            _upload_pack_request(str(fleet.head("main"))),
            content_type="application/x-git-upload-pack-request",
            headers=basic(TOKEN),
        )
    assert response.status_code == 504
    assert b"0.5 s" in response.content
    assert len(spawned.processes) == 1
    assert spawned.left_running() == []
