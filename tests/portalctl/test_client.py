"""portalctl's own parts, against a real local HTTP server: configuration on disk, problem
details read as errors, pages followed, output formats. The whole client against the portal
itself: test_live.py."""

from __future__ import annotations

import json
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from portalctl import config
from portalctl.cli import KINDS, main
from portalctl.client import ApiError, Client
from portalctl.output import render

PROBLEM = {
    "type": "/api/v1/problems/invalid-input",
    "title": "Bad request",
    "status": 400,
    "detail": "spec.gpus: Ensure this value is at least 1.",
    "errors": {"spec.gpus": ["Ensure this value is at least 1."]},
}


class Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, str]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        port = self.server.server_address[1]
        if self.path == "/api/v1/tenants/":
            nxt = f"http://127.0.0.1:{port}/api/v1/tenants/?page=2"
            self._send(200, {"count": 3, "next": nxt, "results": [{"slug": "a"}, {"slug": "b"}]})
        elif self.path == "/api/v1/tenants/?page=2":
            self._send(200, {"count": 3, "next": None, "results": [{"slug": "c"}]})
        else:
            self._send(
                404,
                {"type": "x", "title": "Not found", "status": 404, "detail": "No such thing."},
                "application/problem+json",
            )

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.seen.append(("POST", self.path, self.rfile.read(length).decode()))
        self._send(400, PROBLEM, "application/problem+json")


@pytest.fixture
def server() -> Iterator[str]:
    Handler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "cfg" / "config.json"
    monkeypatch.setenv("PORTALCTL_CONFIG", str(target))
    monkeypatch.delenv("PORTAL_URL", raising=False)
    monkeypatch.delenv("PORTAL_TOKEN", raising=False)
    return target


def test_it_follows_pages_and_sends_the_token(server: str) -> None:
    client = Client(server, "afp_abc_secret")
    assert [t["slug"] for t in client.items("/tenants/")] == ["a", "b", "c"]
    assert {auth for _, _, auth in Handler.seen} == {"Bearer afp_abc_secret"}


def test_it_reads_problem_details_as_an_error(server: str) -> None:
    client = Client(server, "t")
    with pytest.raises(ApiError) as caught:
        client.request("POST", "/apply/", data=b"kind: X\n", content_type="application/yaml")
    error = caught.value
    assert (error.status, error.title) == (400, "Bad request")
    assert error.errors == {"spec.gpus": ["Ensure this value is at least 1."]}
    assert "spec.gpus: Ensure this value is at least 1." in str(error)
    assert Handler.seen[-1] == ("POST", "/api/v1/apply/", "kind: X\n")


def test_an_unreachable_portal_is_a_clear_error() -> None:
    with pytest.raises(ApiError, match="cannot reach"):
        Client("http://127.0.0.1:9", "t").get("/tenants/")


def test_login_keeps_the_token_readable_by_its_owner_only(
    server: str, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["login", "--url", server + "/", "--token", "afp_abc_secret"]) == 0
    assert "3 tenant(s) visible" in capsys.readouterr().out
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert config.load() == config.Config(server, "afp_abc_secret")


def test_the_environment_wins_over_the_file(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config.save(config.Config("https://a.example", "file-token"))
    monkeypatch.setenv("PORTAL_TOKEN", "env-token")
    assert config.load() == config.Config("https://a.example", "env-token")


def test_it_says_how_to_log_in_when_it_is_not(config_file: Path) -> None:
    with pytest.raises(SystemExit, match="portalctl login"):
        main(["get", "tenants"])


def test_a_refused_call_exits_1_with_the_reason(
    server: str, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config.save(config.Config(server, "t"))
    assert main(["get", "gpushares", "nope", "--tenant", "alpha"]) == 1
    assert "Not found (404): No such thing." in capsys.readouterr().err


def test_an_unknown_resource_names_the_known_ones(server: str, config_file: Path) -> None:
    config.save(config.Config(server, "t"))
    with pytest.raises(SystemExit, match="clusters, endpoints, gpushares"):
        main(["get", "widgets", "--tenant", "alpha"])


def test_kind_aliases_reach_one_segment_each() -> None:
    assert KINDS["GpuShare".lower()] == KINDS["gpu-share"] == ("gpushares", "GpuShare")
    assert KINDS["vcluster"] == ("clusters", "TenantCluster")
    assert KINDS["endpoint"] == ("endpoints", "ModelEndpoint")


def test_output_formats() -> None:
    rows = [{"slug": "alpha", "n": 1}, {"slug": "bravo-long", "n": 22}]
    columns = [("SLUG", lambda r: r["slug"]), ("N", lambda r: r["n"])]
    assert render(rows, "table", columns).splitlines() == [
        "SLUG        N",
        "alpha       1",
        "bravo-long  22",
    ]
    assert json.loads(render(rows, "json")) == rows
    assert list(yaml.safe_load_all(render(rows, "yaml"))) == rows
