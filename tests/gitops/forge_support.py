"""A local HTTP server that replays recorded forge responses, for the forge client tests.

The forges are remote services, so their API side is a stand-in: a ``http.server`` on
127.0.0.1 answers each expected method and path with a recording of what the forge really
returns (``forge_recordings/*.json``) and keeps every request it got, so tests check what the
portal sends as well as what it reads.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).parent / "forge_recordings"


def recording(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDINGS / f"{name}.json").read_text())
    return data


def body_of(data: object) -> bytes:
    return json.dumps(data).encode()


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ReplayServer:
    """Answers ``routes[(method, path)]`` with ``(status, JSON)``; anything else is a 404."""

    url: str = ""
    routes: dict[tuple[str, str], tuple[int, object]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def route(self, method: str, path: str, status: int, data: object) -> None:
        self.routes[(method, path)] = (status, data)

    @property
    def last(self) -> Request:
        assert self.requests, "the client sent no request"
        return self.requests[-1]


@contextmanager
def replay_server() -> Iterator[ReplayServer]:
    replay = ReplayServer()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            replay.requests.append(
                Request(
                    self.command, self.path, dict(self.headers.items()), self.rfile.read(length)
                )
            )
            status, data = replay.routes.get(
                (self.command, self.path), (404, {"message": "Not Found"})
            )
            payload = body_of(data)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_PUT = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll keeps shutdown (and so each test's teardown) quick.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    replay.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield replay
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
