"""Forge clients against a local HTTP server that replays recorded forge responses.

The server (``forge_support``) answers with recordings of what each forge really returns
(``forge_recordings/*.json``, each naming its source in ``_source``) and keeps every request
it got, so the tests check what the clients send as well as what they read. Webhook
signatures are computed here the way each forge computes them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import requests
from django.core.exceptions import ImproperlyConfigured

from gitops.forges import (
    ForgeError,
    GiteaProvider,
    GitHubProvider,
    GitLabProvider,
    RemotePullRequest,
    WebhookEvent,
    WebhookForeignError,
    WebhookPayloadError,
    WebhookSignatureError,
    get_forge,
)
from tests.gitops.forge_support import RECORDINGS, ReplayServer, body_of, recording, replay_server

TOKEN = "tok-123"
SECRET = "hook-secret"
# The repositories the recorded webhook deliveries are about.
GITHUB_HOOK_REPO = "Codertocat/Hello-World"
GITLAB_HOOK_PROJECT = "awesome_space/awesome_project"  # object_attributes.target
GITLAB_HOOK_PROJECT_ID = 14  # object_attributes.target_project_id
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    with replay_server() as replay:
        yield replay


def session() -> requests.Session:
    # Proxy variables from the environment must not divert requests meant for loopback.
    s = requests.Session()
    s.trust_env = False
    return s


def github(
    server: ReplayServer, secret: str = SECRET, repo: str = "octocat/Hello-World"
) -> GitHubProvider:
    return GitHubProvider(
        api_url=server.url,
        repo=repo,
        token=TOKEN,
        webhook_secret=secret,
        session=session(),
        timeout=5,
    )


def gitlab(server: ReplayServer, repo: str = "my-group/my-project") -> GitLabProvider:
    return GitLabProvider(
        api_url=server.url + "/api/v4",
        repo=repo,
        token=TOKEN,
        webhook_secret=SECRET,
        session=session(),
        timeout=5,
    )


def gitea(server: ReplayServer) -> GiteaProvider:
    return GiteaProvider(
        api_url=server.url + "/api/v1/",
        repo="anbraten/test-repo",
        token=TOKEN,
        webhook_secret=SECRET,
        session=session(),
        timeout=5,
    )


def hex_hmac(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github_hooks(server: ReplayServer, secret: str = SECRET) -> GitHubProvider:
    """A GitHub client configured for the repository of the recorded deliveries."""
    return github(server, secret, repo=GITHUB_HOOK_REPO)


def gitlab_hooks(server: ReplayServer, project: str = GITLAB_HOOK_PROJECT) -> GitLabProvider:
    return gitlab(server, repo=project)


def github_headers(event: str, body: bytes, secret: str = SECRET) -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": DELIVERY,
        "X-Hub-Signature-256": "sha256=" + hex_hmac(secret, body),
        "Content-Type": "application/json",
    }


def gitea_headers(event: str, body: bytes, secret: str = SECRET) -> dict[str, str]:
    # What Gitea's services/webhook/deliver.go addDefaultHeaders sends.
    signature = hex_hmac(secret, body)
    return {
        "X-Gitea-Delivery": DELIVERY,
        "X-Gogs-Delivery": DELIVERY,
        "X-GitHub-Delivery": DELIVERY,
        "X-Gitea-Event": event,
        "X-Gitea-Event-Type": event,
        "X-Gitea-Signature": signature,
        "X-Gogs-Signature": signature,
        "X-Hub-Signature-256": "sha256=" + signature,
        "X-GitHub-Event": event,
        "Content-Type": "application/json",
    }


def gitlab_headers(event: str, token: str = SECRET) -> dict[str, str]:
    # What app/services/web_hook_service.rb build_headers sends (GitLab with idempotency keys).
    return {
        "X-Gitlab-Event": event,
        "X-Gitlab-Token": token,
        "Idempotency-Key": DELIVERY,
        "X-Gitlab-Event-UUID": "0c9fd5bf-1c3a-4d8e-9d4e-3e1f6a1d2b7c",
        "X-Gitlab-Webhook-UUID": "5d1f7c8e-2b3a-4c5d-8e9f-0a1b2c3d4e5f",
        "X-Gitlab-Instance": "http://example.com",
        "Content-Type": "application/json",
    }


# --- GitHub API -------------------------------------------------------------------------------


def test_it_opens_a_github_pull_request(server: ReplayServer) -> None:
    server.route("POST", "/repos/octocat/Hello-World/pulls", 201, recording("github_create_pull"))

    pr = github(server).open_pull_request(
        head_branch="new-topic", base_branch="master", title="Amazing new feature", body="Please"
    )

    assert pr == RemotePullRequest(
        number=1347, url="https://github.com/octocat/Hello-World/pull/1347", state="open"
    )
    sent = server.last
    assert (sent.method, sent.path) == ("POST", "/repos/octocat/Hello-World/pulls")
    assert sent.headers["Authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["Accept"] == "application/vnd.github+json"
    assert sent.headers["X-GitHub-Api-Version"] == "2022-11-28"
    assert sent.json() == {
        "title": "Amazing new feature",
        "head": "new-topic",
        "base": "master",
        "body": "Please",
    }


def test_it_sends_awkward_names_as_json_and_quotes_path_segments(server: ReplayServer) -> None:
    provider = GitHubProvider(
        api_url=server.url,
        repo="acme/fleet repo",
        token=TOKEN,
        webhook_secret=SECRET,
        session=session(),
    )
    server.route("POST", "/repos/acme/fleet%20repo/pulls", 201, recording("github_create_pull"))
    title = 'Grant "gpu" to alpha\n&base=evil'

    provider.open_pull_request(head_branch="cr/7?x=1", base_branch="main", title=title, body="")

    assert server.last.json()["title"] == title
    assert server.last.json()["head"] == "cr/7?x=1"


def test_it_reads_a_merged_github_pull_request(server: ReplayServer) -> None:
    pull = recording("github_webhook_pull_request_closed_merged")["pull_request"]
    server.route("GET", "/repos/octocat/Hello-World/pulls/2", 200, pull)

    pr = github(server).get_pull_request(2)

    assert pr.state == "merged"
    assert pr.merged is True
    assert pr.merge_sha == "c4295bd74fb0f4fda03689c3df3f2803b658fd85"
    assert server.last.headers["Authorization"] == f"Bearer {TOKEN}"


def test_it_ignores_the_test_merge_sha_of_an_unmerged_github_pull_request(
    server: ReplayServer,
) -> None:
    pull = recording("github_webhook_pull_request_closed")["pull_request"]
    server.route("GET", "/repos/octocat/Hello-World/pulls/2", 200, pull)

    pr = github(server).get_pull_request(2)

    assert (pr.state, pr.merged, pr.merge_sha) == ("closed", False, None)


def test_it_closes_a_github_pull_request(server: ReplayServer) -> None:
    server.route(
        "PATCH", "/repos/octocat/Hello-World/pulls/1347", 200, recording("github_create_pull")
    )

    github(server).close_pull_request(1347)

    assert server.last.method == "PATCH"
    assert server.last.json() == {"state": "closed"}


def test_it_reports_a_github_validation_error_with_its_message(server: ReplayServer) -> None:
    server.route("POST", "/repos/octocat/Hello-World/pulls", 422, recording("github_error_422"))

    with pytest.raises(ForgeError) as caught:
        github(server).open_pull_request(
            head_branch="new-topic", base_branch="master", title="t", body=""
        )

    assert caught.value.forge == "GitHub"
    assert caught.value.status == 422
    assert "Validation Failed" in caught.value.message
    assert "A pull request already exists for octocat:new-topic." in caught.value.message
    assert TOKEN not in str(caught.value)


def test_it_reports_a_missing_pull_request_as_a_forge_error(server: ReplayServer) -> None:
    with pytest.raises(ForgeError) as caught:
        github(server).get_pull_request(99)
    assert caught.value.status == 404
    assert "Not Found" in str(caught.value)


def test_it_reports_an_unreachable_forge_as_a_forge_error(server: ReplayServer) -> None:
    provider = GitHubProvider(
        api_url="http://127.0.0.1:9",
        repo="o/r",
        token=TOKEN,
        webhook_secret=SECRET,
        session=session(),
        timeout=2,
    )
    with pytest.raises(ForgeError) as caught:
        provider.get_pull_request(1)
    assert caught.value.status is None


def test_it_reports_an_unexpected_response_shape_as_a_forge_error(server: ReplayServer) -> None:
    server.route("GET", "/repos/octocat/Hello-World/pulls/1", 200, {"id": 1})
    with pytest.raises(ForgeError, match=r"GitHub pull request: \w+ is missing"):
        github(server).get_pull_request(1)


def test_it_rejects_a_github_repo_that_is_not_owner_slash_name() -> None:
    with pytest.raises(ImproperlyConfigured, match="owner/name"):
        GitHubProvider(repo="just-a-name", token=TOKEN, webhook_secret=SECRET)


# --- GitHub webhooks --------------------------------------------------------------------------


def test_it_reads_a_signed_github_merge(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed_merged"))

    event = github_hooks(server).parse_webhook(github_headers("pull_request", body), body)

    assert event == WebhookEvent(
        kind="merged",
        number=2,
        merge_sha="c4295bd74fb0f4fda03689c3df3f2803b658fd85",
        head_branch="changes",
        url="https://github.com/Codertocat/Hello-World/pull/2",
        base_branch="master",
        repository="Codertocat/Hello-World",
        repository_id=186853002,
        delivery=DELIVERY,
    )


def test_it_reads_a_github_close_without_merge(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed"))

    event = github_hooks(server).parse_webhook(github_headers("pull_request", body), body)

    assert event is not None
    assert (event.kind, event.number, event.merge_sha) == ("closed", 2, None)


def test_it_reads_github_header_names_in_any_case(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed_merged"))
    headers = {k.lower(): v for k, v in github_headers("pull_request", body).items()}

    event = github_hooks(server).parse_webhook(headers, body)

    assert event is not None and event.kind == "merged"


def test_it_ignores_github_pings_and_other_events(server: ReplayServer) -> None:
    provider = github_hooks(server)
    ping = body_of(recording("github_webhook_ping"))
    assert provider.parse_webhook(github_headers("ping", ping), ping) is None

    push = body_of({"ref": "refs/heads/main"})
    assert provider.parse_webhook(github_headers("push", push), push) is None

    opened = recording("github_webhook_pull_request_closed")
    opened["action"] = "opened"
    body = body_of(opened)
    assert provider.parse_webhook(github_headers("pull_request", body), body) is None


def test_it_refuses_a_tampered_github_body(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed"))
    headers = github_headers("pull_request", body)
    tampered = body.replace(b'"merged": false', b'"merged": true')
    assert tampered != body

    with pytest.raises(WebhookSignatureError):
        github_hooks(server).parse_webhook(headers, tampered)


def test_it_refuses_a_github_delivery_signed_with_another_secret(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed_merged"))
    with pytest.raises(WebhookSignatureError, match="does not match"):
        github_hooks(server).parse_webhook(
            github_headers("pull_request", body, secret="other"), body
        )


def test_it_refuses_an_unsigned_github_delivery(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed_merged"))
    headers = github_headers("pull_request", body)
    del headers["X-Hub-Signature-256"]
    with pytest.raises(WebhookSignatureError, match="missing"):
        github_hooks(server).parse_webhook(headers, body)


def test_it_refuses_every_delivery_when_no_secret_is_configured(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed_merged"))
    with pytest.raises(WebhookSignatureError, match="no webhook secret"):
        github_hooks(server, secret="").parse_webhook(
            github_headers("pull_request", body, ""), body
        )


def test_it_reports_signed_github_junk_as_a_payload_error(server: ReplayServer) -> None:
    provider = github_hooks(server)
    junk = b"{not json"
    with pytest.raises(WebhookPayloadError, match="not JSON"):
        provider.parse_webhook(github_headers("pull_request", junk), junk)

    array = b"[1, 2]"
    with pytest.raises(WebhookPayloadError, match="JSON object"):
        provider.parse_webhook(github_headers("pull_request", array), array)

    data = recording("github_webhook_pull_request_closed_merged")
    del data["pull_request"]["number"]
    body = body_of(data)
    with pytest.raises(WebhookPayloadError, match=r"pull_request\.number is missing"):
        provider.parse_webhook(github_headers("pull_request", body), body)

    data = recording("github_webhook_pull_request_closed_merged")
    data["pull_request"]["number"] = "2"
    body = body_of(data)
    with pytest.raises(WebhookPayloadError, match="must be an integer"):
        provider.parse_webhook(github_headers("pull_request", body), body)


# --- GitLab API -------------------------------------------------------------------------------


def test_it_opens_a_gitlab_merge_request(server: ReplayServer) -> None:
    path = "/api/v4/projects/my-group%2Fmy-project/merge_requests"
    server.route("POST", path, 201, recording("gitlab_create_mr"))

    pr = gitlab(server).open_pull_request(
        head_branch="test1", base_branch="master", title="test1", body="fixed paddings"
    )

    assert pr == RemotePullRequest(
        number=1, url="http://gitlab.example.com/my-group/my-project/merge_requests/1", state="open"
    )
    sent = server.last
    assert (sent.method, sent.path) == ("POST", path)
    assert sent.headers["PRIVATE-TOKEN"] == TOKEN
    assert "Authorization" not in sent.headers
    assert sent.json() == {
        "source_branch": "test1",
        "target_branch": "master",
        "title": "test1",
        "description": "fixed paddings",
    }


@pytest.mark.parametrize(
    ("repo", "segment"),
    [("42", "42"), ("my-group%2Fmy-project", "my-group%2Fmy-project"), ("a/b/c", "a%2Fb%2Fc")],
)
def test_it_encodes_the_gitlab_project_once(server: ReplayServer, repo: str, segment: str) -> None:
    server.route(
        "GET", f"/api/v4/projects/{segment}/merge_requests/1", 200, recording("gitlab_create_mr")
    )

    assert gitlab(server, repo=repo).get_pull_request(1).number == 1


def test_it_reads_a_merged_gitlab_merge_request(server: ReplayServer) -> None:
    path = "/api/v4/projects/my-group%2Fmy-project/merge_requests/1"
    server.route("GET", path, 200, recording("gitlab_get_mr_merged"))

    pr = gitlab(server).get_pull_request(1)

    assert (pr.state, pr.merged) == ("merged", True)
    assert pr.merge_sha == "f0d4b917473e4c67e5a2bf14f372b189c8442903"


def test_it_closes_a_gitlab_merge_request(server: ReplayServer) -> None:
    path = "/api/v4/projects/my-group%2Fmy-project/merge_requests/1"
    server.route("PUT", path, 200, recording("gitlab_create_mr"))

    gitlab(server).close_pull_request(1)

    assert server.last.method == "PUT"
    assert server.last.json() == {"state_event": "close"}


def test_it_reports_a_gitlab_conflict_with_its_message(server: ReplayServer) -> None:
    path = "/api/v4/projects/my-group%2Fmy-project/merge_requests"
    server.route("POST", path, 409, recording("gitlab_error_409"))

    with pytest.raises(ForgeError) as caught:
        gitlab(server).open_pull_request(head_branch="a", base_branch="b", title="t", body="")

    assert (caught.value.forge, caught.value.status) == ("GitLab", 409)
    assert "Another open merge request already exists" in caught.value.message


def test_it_needs_an_api_url_for_gitlab() -> None:
    with pytest.raises(ImproperlyConfigured, match="GITOPS_FORGE_API_URL"):
        GitLabProvider(api_url="", repo="1", token=TOKEN, webhook_secret=SECRET)


# --- GitLab webhooks --------------------------------------------------------------------------


def test_it_reads_a_gitlab_merge(server: ReplayServer) -> None:
    body = body_of(recording("gitlab_webhook_mr_merge"))

    event = gitlab_hooks(server).parse_webhook(gitlab_headers("Merge Request Hook"), body)

    assert event == WebhookEvent(
        kind="merged",
        number=1,
        merge_sha="53027d060246c8f47e4a9310fb332aa52f221775",
        head_branch="ms-viewport",
        url="http://example.com/diaspora/merge_requests/1",
        base_branch="master",
        repository=GITLAB_HOOK_PROJECT,
        repository_id=GITLAB_HOOK_PROJECT_ID,
        delivery=DELIVERY,
    )


def test_it_reads_a_gitlab_close(server: ReplayServer) -> None:
    body = body_of(recording("gitlab_webhook_mr_close"))

    event = gitlab_hooks(server).parse_webhook(gitlab_headers("Merge Request Hook"), body)

    assert event is not None
    assert (event.kind, event.merge_sha, event.head_branch) == ("closed", None, "ms-viewport")


def test_it_ignores_other_gitlab_events_and_actions(server: ReplayServer) -> None:
    provider = gitlab_hooks(server)
    push = body_of({"object_kind": "push"})
    assert provider.parse_webhook(gitlab_headers("Push Hook"), push) is None

    update = recording("gitlab_webhook_mr_merge")
    update["object_attributes"]["action"] = "update"
    assert provider.parse_webhook(gitlab_headers("Merge Request Hook"), body_of(update)) is None


@pytest.mark.parametrize("token", ["wrong", SECRET + " ", ""])
def test_it_refuses_a_gitlab_delivery_without_the_token(server: ReplayServer, token: str) -> None:
    body = body_of(recording("gitlab_webhook_mr_merge"))
    headers = gitlab_headers("Merge Request Hook", token=token)
    if not token:
        del headers["X-Gitlab-Token"]

    with pytest.raises(WebhookSignatureError):
        gitlab_hooks(server).parse_webhook(headers, body)


def test_it_reports_signed_gitlab_junk_as_a_payload_error(server: ReplayServer) -> None:
    provider = gitlab_hooks(server)
    with pytest.raises(WebhookPayloadError):
        provider.parse_webhook(gitlab_headers("Merge Request Hook"), b"\xff\xfe")

    data = recording("gitlab_webhook_mr_merge")
    del data["object_attributes"]["iid"]
    with pytest.raises(WebhookPayloadError, match=r"object_attributes\.iid is missing"):
        provider.parse_webhook(gitlab_headers("Merge Request Hook"), body_of(data))


# --- Gitea API --------------------------------------------------------------------------------


def test_it_opens_a_gitea_pull_request(server: ReplayServer) -> None:
    path = "/api/v1/repos/anbraten/test-repo/pulls"
    server.route("POST", path, 201, recording("gitea_create_pull"))

    pr = gitea(server).open_pull_request(
        head_branch="anbraten-patch-1", base_branch="main", title="Adjust file", body=""
    )

    assert pr == RemotePullRequest(
        number=1, url="https://gitea.com/anbraten/test-repo/pulls/1", state="open"
    )
    sent = server.last
    assert (sent.method, sent.path) == ("POST", path)
    assert sent.headers["Authorization"] == f"token {TOKEN}"
    assert sent.json() == {
        "head": "anbraten-patch-1",
        "base": "main",
        "title": "Adjust file",
        "body": "",
    }


def test_it_reads_a_merged_gitea_pull_request(server: ReplayServer) -> None:
    pull = recording("gitea_webhook_pull_request_merged")["pull_request"]
    server.route("GET", "/api/v1/repos/anbraten/test-repo/pulls/1", 200, pull)

    pr = gitea(server).get_pull_request(1)

    assert (pr.state, pr.merged) == ("merged", True)
    assert pr.merge_sha == "f2440f050054df0f8ecabcace648f1683509064c"


def test_it_closes_a_gitea_pull_request(server: ReplayServer) -> None:
    pull = recording("gitea_webhook_pull_request_closed")["pull_request"]
    server.route("PATCH", "/api/v1/repos/anbraten/test-repo/pulls/1", 201, pull)

    gitea(server).close_pull_request(1)

    assert server.last.json() == {"state": "closed"}


def test_it_reports_a_gitea_conflict_with_its_message(server: ReplayServer) -> None:
    server.route(
        "POST", "/api/v1/repos/anbraten/test-repo/pulls", 409, recording("gitea_error_409")
    )

    with pytest.raises(ForgeError) as caught:
        gitea(server).open_pull_request(head_branch="a", base_branch="main", title="t", body="")

    assert (caught.value.forge, caught.value.status) == ("Gitea", 409)
    assert caught.value.message.startswith("pull request already exists for these targets")


# --- Gitea webhooks ---------------------------------------------------------------------------


def test_it_reads_a_signed_gitea_merge(server: ReplayServer) -> None:
    body = body_of(recording("gitea_webhook_pull_request_merged"))

    event = gitea(server).parse_webhook(gitea_headers("pull_request", body), body)

    assert event == WebhookEvent(
        kind="merged",
        number=1,
        merge_sha="f2440f050054df0f8ecabcace648f1683509064c",
        head_branch="anbraten-patch-1",
        url="https://gitea.com/anbraten/test-repo/pulls/1",
        base_branch="main",
        repository="anbraten/test-repo",
        repository_id=46534,
        delivery=DELIVERY,
    )


def test_it_reads_a_gitea_close_without_merge(server: ReplayServer) -> None:
    body = body_of(recording("gitea_webhook_pull_request_closed"))

    event = gitea(server).parse_webhook(gitea_headers("pull_request", body), body)

    assert event is not None
    assert (event.kind, event.merge_sha) == ("closed", None)


def test_it_accepts_a_gitea_delivery_signed_only_github_style(server: ReplayServer) -> None:
    body = body_of(recording("gitea_webhook_pull_request_merged"))
    headers = gitea_headers("pull_request", body)
    del headers["X-Gitea-Signature"]

    event = gitea(server).parse_webhook(headers, body)

    assert event is not None and event.kind == "merged"


def test_it_does_not_rescue_a_wrong_gitea_signature_with_another_header(
    server: ReplayServer,
) -> None:
    body = body_of(recording("gitea_webhook_pull_request_merged"))
    headers = gitea_headers("pull_request", body)
    headers["X-Gitea-Signature"] = hex_hmac("other", body)

    with pytest.raises(WebhookSignatureError, match="X-Gitea-Signature"):
        gitea(server).parse_webhook(headers, body)


def test_it_refuses_tampered_or_unsigned_gitea_deliveries(server: ReplayServer) -> None:
    provider = gitea(server)
    body = body_of(recording("gitea_webhook_pull_request_closed"))
    headers = gitea_headers("pull_request", body)
    with pytest.raises(WebhookSignatureError):
        provider.parse_webhook(headers, body.replace(b'"merged": false', b'"merged": true'))

    for name in ("X-Gitea-Signature", "X-Hub-Signature-256"):
        del headers[name]
    with pytest.raises(WebhookSignatureError, match="missing"):
        provider.parse_webhook(headers, body)


def test_it_ignores_other_gitea_events(server: ReplayServer) -> None:
    body = body_of({"ref": "refs/heads/main"})
    assert gitea(server).parse_webhook(gitea_headers("push", body), body) is None


def test_it_reports_signed_gitea_junk_as_a_payload_error(server: ReplayServer) -> None:
    data = recording("gitea_webhook_pull_request_merged")
    del data["pull_request"]["head"]
    body = body_of(data)
    with pytest.raises(WebhookPayloadError, match=r"pull_request\.head\.ref is missing"):
        gitea(server).parse_webhook(gitea_headers("pull_request", body), body)


# --- Recordings and configuration -------------------------------------------------------------


def test_it_keeps_a_source_on_every_recording() -> None:
    names = sorted(RECORDINGS.glob("*.json"))
    assert names
    for path in names:
        source = json.loads(path.read_text()).get("_source")
        assert isinstance(source, str) and source, f"{path.name} has no _source"


def forge_settings(**overrides: str) -> SimpleNamespace:
    values = {
        "GITOPS_FORGE": "github",
        "GITOPS_FORGE_API_URL": "",
        "GITOPS_FORGE_REPO": "octocat/Hello-World",
        "GITOPS_FORGE_TOKEN": TOKEN,
        "GITOPS_FORGE_WEBHOOK_SECRET": SECRET,
    }
    values.update(overrides)
    return SimpleNamespace(**values)


def test_it_has_no_forge_by_default() -> None:
    assert get_forge(forge_settings(GITOPS_FORGE="")) is None


def test_it_builds_the_configured_forge() -> None:
    forge = get_forge(forge_settings(GITOPS_FORGE=" GitHub "))
    assert isinstance(forge, GitHubProvider)
    assert forge.api_url == "https://api.github.com"

    forge = get_forge(
        forge_settings(GITOPS_FORGE="gitlab", GITOPS_FORGE_API_URL="https://gl.example/api/v4/")
    )
    assert isinstance(forge, GitLabProvider)
    assert forge.api_url == "https://gl.example/api/v4"

    forge = get_forge(
        forge_settings(GITOPS_FORGE="gitea", GITOPS_FORGE_API_URL="https://gitea.example/api/v1")
    )
    assert isinstance(forge, GiteaProvider)


def test_it_names_the_allowed_forges_for_an_unknown_one() -> None:
    with pytest.raises(ImproperlyConfigured, match="gitea, github, gitlab"):
        get_forge(forge_settings(GITOPS_FORGE="bitbucket"))


def test_it_refuses_a_forge_without_its_credentials() -> None:
    with pytest.raises(ImproperlyConfigured, match="GITOPS_FORGE_WEBHOOK_SECRET"):
        get_forge(forge_settings(GITOPS_FORGE_WEBHOOK_SECRET=""))
    with pytest.raises(ImproperlyConfigured, match="GITOPS_FORGE_API_URL"):
        get_forge(forge_settings(GITOPS_FORGE="gitea"))


def test_it_names_the_field_of_a_structured_github_error(server: ReplayServer) -> None:
    error = recording("github_error_422")
    error["errors"] = [{"resource": "PullRequest", "field": "head", "code": "invalid"}]
    server.route("POST", "/repos/octocat/Hello-World/pulls", 422, error)

    with pytest.raises(ForgeError) as caught:
        github(server).open_pull_request(head_branch="x", base_branch="master", title="t", body="")

    assert caught.value.message == "Validation Failed: PullRequest head invalid"


# --- Delivery ids and the configured repository ----------------------------------------------


def test_it_reads_each_forges_delivery_id(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed_merged"))
    event = github_hooks(server).parse_webhook(github_headers("pull_request", body), body)
    assert event is not None and event.delivery == DELIVERY

    body = body_of(recording("gitea_webhook_pull_request_merged"))
    headers = gitea_headers("pull_request", body)
    headers["X-GitHub-Delivery"] = "not-the-gitea-one"
    event = gitea(server).parse_webhook(headers, body)
    assert event is not None and event.delivery == DELIVERY

    body = body_of(recording("gitlab_webhook_mr_merge"))
    event = gitlab_hooks(server).parse_webhook(gitlab_headers("Merge Request Hook"), body)
    # Idempotency-Key, which GitLab keeps across its retries, not the per-attempt UUIDs.
    assert event is not None and event.delivery == DELIVERY


def test_it_falls_back_to_the_event_uuid_of_a_gitlab_without_idempotency_keys(
    server: ReplayServer,
) -> None:
    body = body_of(recording("gitlab_webhook_mr_merge"))
    headers = gitlab_headers("Merge Request Hook")
    del headers["Idempotency-Key"]

    event = gitlab_hooks(server).parse_webhook(headers, body)

    assert event is not None and event.delivery == headers["X-Gitlab-Event-UUID"]


@pytest.mark.parametrize("forge", ["github", "gitea", "gitlab"])
def test_it_refuses_a_delivery_without_its_delivery_id(server: ReplayServer, forge: str) -> None:
    if forge == "github":
        body = body_of(recording("github_webhook_pull_request_closed_merged"))
        headers, provider = github_headers("pull_request", body), github_hooks(server)
        del headers["X-GitHub-Delivery"]
    elif forge == "gitea":
        body = body_of(recording("gitea_webhook_pull_request_merged"))
        headers, provider = gitea_headers("pull_request", body), gitea(server)
        # Gitea also sends the GitHub-style id; its own is the one it always sends.
        del headers["X-Gitea-Delivery"]
    else:
        body = body_of(recording("gitlab_webhook_mr_merge"))
        headers, provider = gitlab_headers("Merge Request Hook"), gitlab_hooks(server)
        del headers["Idempotency-Key"], headers["X-Gitlab-Event-UUID"]

    with pytest.raises(WebhookPayloadError, match="is missing"):
        provider.parse_webhook(headers, body)


def test_it_refuses_a_delivery_id_that_is_not_one(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed_merged"))
    for junk in ("a b", "x" * 101, "caf\u00e9"):
        headers = github_headers("pull_request", body)
        headers["X-GitHub-Delivery"] = junk
        with pytest.raises(WebhookPayloadError, match="not a delivery id"):
            github_hooks(server).parse_webhook(headers, body)


def test_it_refuses_a_ping_without_a_delivery_id(server: ReplayServer) -> None:
    ping = body_of(recording("github_webhook_ping"))
    headers = github_headers("ping", ping)
    del headers["X-GitHub-Delivery"]
    with pytest.raises(WebhookPayloadError):
        github_hooks(server).parse_webhook(headers, ping)


def test_it_ignores_pull_requests_of_another_github_repository(server: ReplayServer) -> None:
    body = body_of(recording("github_webhook_pull_request_closed_merged"))
    # The configured repository differs from the one the (signed) delivery is about.
    with pytest.raises(WebhookForeignError, match="Codertocat/Hello-World"):
        github(server, repo="ai-factory/fleet").parse_webhook(
            github_headers("pull_request", body), body
        )
    # GitHub's owner and repository names are case-insensitive.
    event = github(server, repo="codertocat/hello-world").parse_webhook(
        github_headers("pull_request", body), body
    )
    assert event is not None


def test_it_ignores_a_github_pull_request_from_a_fork(server: ReplayServer) -> None:
    provider = github_hooks(server)
    data = recording("github_webhook_pull_request_closed_merged")
    data["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    body = body_of(data)
    with pytest.raises(WebhookForeignError, match="fork"):
        provider.parse_webhook(github_headers("pull_request", body), body)

    # A deleted fork leaves head.repo null.
    data["pull_request"]["head"]["repo"] = None
    body = body_of(data)
    with pytest.raises(WebhookForeignError, match="fork"):
        provider.parse_webhook(github_headers("pull_request", body), body)


def test_it_ignores_pull_requests_of_another_gitea_repository(server: ReplayServer) -> None:
    data = recording("gitea_webhook_pull_request_merged")
    data["pull_request"]["base"]["repo"]["full_name"] = "anbraten/other-repo"
    body = body_of(data)
    with pytest.raises(WebhookForeignError, match="anbraten/other-repo"):
        gitea(server).parse_webhook(gitea_headers("pull_request", body), body)

    data = recording("gitea_webhook_pull_request_merged")
    data["pull_request"]["head"]["repo"]["full_name"] = "mallory/test-repo"
    body = body_of(data)
    with pytest.raises(WebhookForeignError, match="fork"):
        gitea(server).parse_webhook(gitea_headers("pull_request", body), body)


@pytest.mark.parametrize(
    "project",
    [GITLAB_HOOK_PROJECT, "Awesome_Space%2Fawesome_project", str(GITLAB_HOOK_PROJECT_ID)],
)
def test_it_matches_the_gitlab_project_by_path_or_id(server: ReplayServer, project: str) -> None:
    body = body_of(recording("gitlab_webhook_mr_merge"))
    event = gitlab_hooks(server, project).parse_webhook(gitlab_headers("Merge Request Hook"), body)
    assert event is not None and event.repository_id == GITLAB_HOOK_PROJECT_ID


@pytest.mark.parametrize("project", ["gitlabhq/gitlab-test", "1", "awesome_space/other"])
def test_it_ignores_merge_requests_of_another_gitlab_project(
    server: ReplayServer, project: str
) -> None:
    # "gitlabhq/gitlab-test" (id 1) is the recording's top-level project: the MR's target
    # project is what counts.
    body = body_of(recording("gitlab_webhook_mr_merge"))
    with pytest.raises(WebhookForeignError):
        gitlab_hooks(server, project).parse_webhook(gitlab_headers("Merge Request Hook"), body)


def test_it_ignores_a_gitlab_merge_request_from_a_fork(server: ReplayServer) -> None:
    data = recording("gitlab_webhook_mr_merge")
    data["object_attributes"]["source_project_id"] = 99
    with pytest.raises(WebhookForeignError, match="fork"):
        gitlab_hooks(server).parse_webhook(gitlab_headers("Merge Request Hook"), body_of(data))
