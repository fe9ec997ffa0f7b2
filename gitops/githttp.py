"""Read-only Git smart HTTP for Flux: clone and fetch the portal's repository, never push.

Like ``git http-backend``, the views run the real ``git upload-pack --stateless-rpc`` and
feed the request body into it and stream its output back out; git does the protocol (v0, v1 and
v2, shallow and filtered fetches), we do routing, authentication and the HTTP framing.

* ``GET  <name>.git/info/refs?service=git-upload-pack`` - the ref advertisement.
* ``POST <name>.git/git-upload-pack`` - negotiation and the pack.
* ``git-receive-pack`` (push), in either form, is refused with 403: changes reach the
  repository only through the portal's reviewed change requests.

Two kinds of repository are served (``gitops.sources``): the fleet repository at
``settings.GITOPS_REPO_PATH``, under its directory name without ``.git``, and each tenant's
read-only projection at ``tenants/<slug>.git``. Authentication is a token sent as the
password of HTTP Basic (any user name, which is what a Flux ``GitRepository`` secret with
``username`` and ``password`` sends) or as ``Authorization: Bearer <token>``. A platform token
(``settings.GITOPS_HTTP_TOKENS``) reads every repository; a tenant's token reads its own
projection only. No or an unknown token gets 401 with a Basic challenge; a valid token asking
for a repository it may not read gets the 404 of a repository that is not there, so a tenant
cannot probe for other tenants.

Two bounds keep one request from tying up a worker: a body larger than
``settings.GITOPS_HTTP_MAX_BODY_BYTES`` (after gzip is inflated; a clone's negotiation is a few
kilobytes, a fetch's grows with the commits it has) gets 413 before git starts, and git that
runs longer than ``settings.GITOPS_HTTP_TIMEOUT_SECONDS`` is killed: 504 if it had not answered
yet, else the response ends short and the client's fetch fails.

Serve it with gunicorn in production. Django's development server (``make demo``) works for
git and for Flux's go-git, with two gaps: it does not decode chunked request bodies (git sends
them only above ``http.postBuffer``, 1 MiB of negotiation), and it ends streamed responses by
closing the connection, which libgit2 clients (pygit2) cannot read. gunicorn handles both.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import logging
import os
import re
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterator
from functools import wraps
from pathlib import Path
from typing import Protocol

from django.conf import settings
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    StreamingHttpResponse,
)
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from gitops import sources

logger = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


# What a Git-Protocol header may carry (e.g. "version=2"); anything else is ignored.
_GIT_PROTOCOL = re.compile(r"[A-Za-z0-9=:._-]{1,100}")
_NO_CACHE = {
    "Expires": "Fri, 01 Jan 1980 00:00:00 GMT",
    "Pragma": "no-cache",
    "Cache-Control": "no-cache, max-age=0, must-revalidate",
}


def _not_found() -> HttpResponse:
    # Plain text for git clients, not the portal's HTML error page.
    return HttpResponse("Repository not found.\n", status=404, content_type="text/plain")


def _token(request: HttpRequest) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip() or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


def _resolve(request: HttpRequest, name: str) -> Path | HttpResponse:
    """The repository ``name`` if the request's token may read it, else the refusal."""
    token = _token(request)
    if token is None or not sources.is_known_token(token):
        response = HttpResponse("Authentication required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Basic realm="fleet"'
        return response
    repository = sources.served(name)
    if repository is None or not sources.may_read(repository, token):
        return _not_found()
    return repository.path


def _push_refused() -> HttpResponse:
    return HttpResponse(
        "This repository is read-only: changes go through the portal's change requests.\n",
        status=403,
        content_type="text/plain",
    )


def _git_env(request: HttpRequest) -> dict[str, str]:
    # No GIT_* variables of the server process leak into git (GIT_DIR would redirect it).
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    protocol = request.headers.get("Git-Protocol", "")
    if _GIT_PROTOCOL.fullmatch(protocol):
        env["GIT_PROTOCOL"] = protocol
    return env


def _text(message: str, status: int) -> HttpResponse:
    return HttpResponse(message, status=status, content_type="text/plain")


def _too_large(limit: int) -> HttpResponse:
    return _text(
        f"The request body is larger than {limit} bytes (GITOPS_HTTP_MAX_BODY_BYTES).\n", 413
    )


def _timed_out(seconds: float) -> HttpResponse:
    return _text(
        f"git upload-pack took longer than {seconds:g} s (GITOPS_HTTP_TIMEOUT_SECONDS).\n", 504
    )


def _pkt_line(text: str) -> bytes:
    data = text.encode("utf-8")
    return b"%04x" % (len(data) + 4) + data


@csrf_exempt
@require_GET
def info_refs(request: HttpRequest, name: str) -> HttpResponse:
    """The ref advertisement that starts every clone and fetch."""
    repo = _resolve(request, name)
    if isinstance(repo, HttpResponse):
        return repo
    service = request.GET.get("service")
    if service == "git-receive-pack":
        return _push_refused()
    if service != "git-upload-pack":
        return HttpResponse("Only smart HTTP is served.\n", status=403, content_type="text/plain")
    env = _git_env(request)
    seconds = settings.GITOPS_HTTP_TIMEOUT_SECONDS
    try:
        # On the timeout, run() kills git and waits for it before raising.
        result = subprocess.run(
            ["git", "upload-pack", "--strict", "--stateless-rpc", "--advertise-refs", str(repo)],
            env=env,
            capture_output=True,
            timeout=seconds,
            check=False,
        )
    except subprocess.TimeoutExpired:
        logger.warning("git upload-pack --advertise-refs for %s killed after %g s", name, seconds)
        return _timed_out(seconds)
    if result.returncode != 0:
        return HttpResponse("git upload-pack failed.\n", status=500, content_type="text/plain")
    # Protocol v0/v1 clients expect the service announcement first; v2 starts with its
    # capability list (git http-backend does the same).
    version2 = "version=2" in env.get("GIT_PROTOCOL", "")
    header = b"" if version2 else _pkt_line("# service=git-upload-pack\n") + b"0000"
    response = HttpResponse(
        header + result.stdout, content_type="application/x-git-upload-pack-advertisement"
    )
    for key, value in _NO_CACHE.items():
        response[key] = value
    return response


@csrf_exempt
@require_POST
def upload_pack(request: HttpRequest, name: str) -> HttpResponseBase:
    """Negotiation and pack data, streamed through ``git upload-pack --stateless-rpc``."""
    repo = _resolve(request, name)
    if isinstance(repo, HttpResponse):
        return repo
    if request.content_type != "application/x-git-upload-pack-request":
        return HttpResponse("Unexpected content type.\n", status=415, content_type="text/plain")
    gzipped = request.headers.get("Content-Encoding", "").lower() in ("gzip", "x-gzip")
    limit = settings.GITOPS_HTTP_MAX_BODY_BYTES
    if _declared_length(request) > limit:
        return _too_large(limit)
    try:
        body = _read_body(_request_body(request), gzipped, limit)
    except zlib.error:
        return _text("The request body is not valid gzip.\n", 400)
    if body is None:
        return _too_large(limit)
    process = subprocess.Popen(
        ["git", "upload-pack", "--strict", "--stateless-rpc", str(repo)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_git_env(request),
    )
    seconds = settings.GITOPS_HTTP_TIMEOUT_SECONDS
    deadline = _Deadline(process, seconds)
    # Feed stdin from another thread while the response drains stdout, so neither pipe can
    # fill up and block the other.
    feeder = threading.Thread(target=_feed, args=(body, process), daemon=True)
    feeder.start()
    exchange = _Exchange(name, process, feeder, deadline)
    # The first output decides the status: a git killed before it answered is a 504, not an
    # empty 200 the client cannot make sense of.
    first = exchange.read()
    if not first and deadline.expired.is_set():
        exchange.finish()
        return _timed_out(seconds)
    response = StreamingHttpResponse(
        exchange.stream(first), content_type="application/x-git-upload-pack-result"
    )
    for key, value in _NO_CACHE.items():
        response[key] = value
    return response


@csrf_exempt
def receive_pack(request: HttpRequest, name: str) -> HttpResponse:
    """Push is never accepted here."""
    return _push_refused()


def _request_body(request: HttpRequest) -> _Readable:
    # Without Content-Length Django reads an empty body; a chunked upload is then read from
    # the WSGI input directly, which servers that decode chunking (gunicorn) end at EOF.
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    if chunked and not request.META.get("CONTENT_LENGTH"):
        stream: _Readable = request.META["wsgi.input"]
        return stream
    return request


def _declared_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _read_body(body: _Readable, gzipped: bool, limit: int) -> bytes | None:
    """The body as git is to read it (inflated), or None when it, sent or inflated, is larger
    than ``limit``. A chunked body has no Content-Length to refuse up front: it is read up to
    the limit and no further."""
    sent = bytearray()
    while chunk := body.read(_CHUNK):
        sent += chunk
        if len(sent) > limit:
            return None
    if not gzipped:
        return bytes(sent)
    # Inflated in one bounded step: a small gzip bomb stops at limit + 1 bytes.
    inflated = zlib.decompressobj(wbits=31).decompress(bytes(sent), limit + 1)
    return None if len(inflated) > limit else inflated


def _feed(body: bytes, process: subprocess.Popen[bytes]) -> None:
    stdin = process.stdin
    assert stdin is not None
    try:
        stdin.write(body)
    except OSError:
        # git exiting early (or killed): closing stdin ends the exchange, and git reports a
        # protocol error in its output.
        pass
    finally:
        with contextlib.suppress(OSError):
            stdin.close()


class _Deadline:
    """Kills ``process`` after ``seconds`` unless cancelled first; ``expired`` says it did."""

    def __init__(self, process: subprocess.Popen[bytes], seconds: float) -> None:
        self.process = process
        self.seconds = seconds
        self.expired = threading.Event()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        self.expired.set()
        # A no-op on a process already reaped.
        with contextlib.suppress(OSError):
            self.process.kill()

    def cancel(self) -> None:
        self._timer.cancel()


class _Exchange:
    """One git upload-pack process: its output, then the clean-up that leaves nothing running."""

    def __init__(
        self,
        name: str,
        process: subprocess.Popen[bytes],
        feeder: threading.Thread,
        deadline: _Deadline,
    ) -> None:
        self.name = name
        self.process = process
        self.feeder = feeder
        self.deadline = deadline
        assert process.stdout is not None
        self.stdout = process.stdout

    def read(self) -> bytes:
        return os.read(self.stdout.fileno(), _CHUNK)

    def stream(self, first: bytes) -> Iterator[bytes]:
        try:
            chunk = first
            while chunk:
                yield chunk
                chunk = self.read()
        finally:
            # Also reached when the client disconnects mid-pack: with stdout closed git fails
            # its next write and exits; one that does not is killed rather than left running.
            self.finish()

    def finish(self) -> None:
        self.stdout.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.deadline.cancel()
        self.feeder.join(timeout=5)
        if self.deadline.expired.is_set():
            logger.warning(
                "git upload-pack for %s killed after %g s", self.name, self.deadline.seconds
            )


def _tenant(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """The same view for ``tenants/<slug>.git``: the name it serves is ``tenants/<slug>``."""

    @wraps(view)
    def wrapped(request: HttpRequest, slug: str) -> HttpResponseBase:
        return view(request, f"tenants/{slug}")

    return wrapped


urlpatterns = [
    path("<str:name>.git/info/refs", info_refs, name="githttp_info_refs"),
    path("<str:name>.git/git-upload-pack", upload_pack, name="githttp_upload_pack"),
    path("<str:name>.git/git-receive-pack", receive_pack, name="githttp_receive_pack"),
    # Token-authenticated (no session), so not behind the tenant membership helper: a token
    # that may not read the projection gets the same 404 as a repository that does not exist.
    path("tenants/<str:slug>.git/info/refs", _tenant(info_refs), name="githttp_tenant_info_refs"),
    path(
        "tenants/<str:slug>.git/git-upload-pack",
        _tenant(upload_pack),
        name="githttp_tenant_upload_pack",
    ),
    path(
        "tenants/<str:slug>.git/git-receive-pack",
        _tenant(receive_pack),
        name="githttp_tenant_receive_pack",
    ),
]
