"""A real OpenID Connect provider for SSO tests, and a form-filling HTTP client to drive it.

The provider is tests/oidc/server.mjs (npm oidc-provider, installed by `make node-deps`). It
is started as a subprocess on a port it picks itself and stopped when the test is done. For
tenant clusters it can serve HTTPS (with a certificate from a throwaway CA, ``make_test_ca``) and
have kubectl's public client, and ``kubelogin_id_token`` signs in the way kubelogin does.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import requests

from tests.support.processes import started
from tests.support.skips import require_tool, skip_or_fail
from tests.support.waiting import wait_until

OIDC_DIR = Path(__file__).resolve().parents[1] / "oidc"
SERVER_SCRIPT = OIDC_DIR / "server.mjs"
CLIENT_ID = "ai-factory-portal"
CLIENT_SECRET = "portal-test-secret-not-for-production"
# kubectl's client (kubelogin), public, as the operator guide has it set up in Keycloak.
CLUSTER_CLIENT_ID = "ai-factory-clusters"
KUBELOGIN_REDIRECT_URI = "http://localhost:8000"
# Generous: the first start after `npm ci` compiles the provider's modules.
START_TIMEOUT = 60.0
HTTP_TIMEOUT = 15.0


def require_oidc_provider() -> str:
    """The path of node, once node and the npm provider are known to be installed."""
    node = require_tool("node", "make system-deps")
    if not (OIDC_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        skip_or_fail("tests/oidc/node_modules is missing (make node-deps)")
    return node


@dataclass
class OidcServer:
    issuer: str
    accounts_file: Path
    log_file: Path

    def set_accounts(self, accounts: dict[str, dict[str, Any]]) -> None:
        """Replace the provider's users; it re-reads the file on every lookup."""
        # Write then rename, so the server never reads a half-written file.
        tmp = self.accounts_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(accounts))
        tmp.replace(self.accounts_file)

    def set_groups(self, sub: str, groups: list[str]) -> None:
        accounts = json.loads(self.accounts_file.read_text())
        accounts[sub]["groups"] = groups
        self.set_accounts(accounts)

    def log(self) -> str:
        """What the provider printed, for failure messages."""
        return self.log_file.read_text(errors="replace")


@dataclass(frozen=True)
class ServerCa:
    """A throwaway CA and a server certificate it signed for 127.0.0.1 (PEM files)."""

    ca_file: Path
    cert_file: Path
    key_file: Path


def make_test_ca(workdir: Path) -> ServerCa:
    """Make a CA and a certificate for https://127.0.0.1 with the ``cryptography`` package."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test identity provider CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = ServerCa(workdir / "ca.pem", workdir / "server.pem", workdir / "server-key.pem")
    files.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


@contextmanager
def run_oidc_server(
    *,
    redirect_uri: str,
    workdir: Path,
    public_client_id: str = "",
    tls: ServerCa | None = None,
) -> Iterator[OidcServer]:
    node = require_oidc_provider()
    accounts_file = workdir / "accounts.json"
    accounts_file.write_text("{}")
    log_file = workdir / "oidc-provider.log"
    extra = [f"--public-client-id={public_client_id}"] if public_client_id else []
    if tls is not None:
        extra += [f"--tls-cert={tls.cert_file}", f"--tls-key={tls.key_file}"]
    args = [
        node,
        str(SERVER_SCRIPT),
        "--port=0",
        f"--redirect-uri={redirect_uri}",
        f"--accounts={accounts_file}",
        f"--client-id={CLIENT_ID}",
        f"--client-secret={CLIENT_SECRET}",
        *extra,
    ]
    with started(args, log_file=log_file, cwd=OIDC_DIR, stop_timeout=5) as provider:
        issuer = wait_until(
            lambda: _announced_issuer(log_file),
            START_TIMEOUT,
            "the OIDC provider to start",
            process=provider.proc,
            details=provider.log,
        )
        yield OidcServer(issuer=issuer, accounts_file=accounts_file, log_file=log_file)


def _announced_issuer(log_file: Path) -> str:
    """The issuer the provider prints once it listens (``READY <issuer>``), or ""."""
    for line in log_file.read_text(errors="replace").splitlines():
        if line.startswith("READY "):
            return line.split(" ", 1)[1].strip()
    return ""


# --- a browser without a browser ----------------------------------------------------------------


@dataclass
class Form:
    action: str
    method: str
    fields: dict[str, str] = field(default_factory=dict)


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []
        self.links: list[str] = []
        self._in_form = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(Form(a.get("action", ""), a.get("method", "get").lower()))
            self._in_form = True
        elif tag == "a" and "href" in a:
            self.links.append(a["href"])
        elif self._in_form and tag in {"input", "button", "select", "textarea"} and a.get("name"):
            kind = a.get("type", "text").lower()
            # Only what a browser would send without a click: no submit buttons, no
            # unchecked boxes.
            if kind in {"submit", "button", "image", "reset"} or tag == "button":
                return
            if kind in {"checkbox", "radio"} and "checked" not in a:
                return
            self.forms[-1].fields[a["name"]] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._in_form = False


def parse_page(html: str) -> _PageParser:
    parser = _PageParser()
    parser.feed(html)
    return parser


@dataclass
class Browser:
    """A requests session that follows redirects itself, so a test can see every hop."""

    session: requests.Session = field(default_factory=requests.Session)
    visited: list[str] = field(default_factory=list)

    def get(self, url: str) -> requests.Response:
        self.visited.append(url)
        return self._follow(self.session.get(url, allow_redirects=False, timeout=HTTP_TIMEOUT))

    def submit(
        self, page: requests.Response, *, action_contains: str = "", **values: str
    ) -> requests.Response:
        """Post the page's first POST form (whose action contains ``action_contains``)."""
        forms = [
            f
            for f in parse_page(page.text).forms
            if f.method == "post" and action_contains in urljoin(page.url, f.action)
        ]
        assert forms, (
            f"no POST form{f' to {action_contains}' if action_contains else ''} on "
            f"{page.url} ({page.status_code}):\n{page.text[:2000]}"
        )
        form = forms[0]
        url = urljoin(page.url, form.action) if form.action else page.url
        self.visited.append(url)
        data = {**form.fields, **values}
        response = self.session.post(
            url,
            data=data,
            allow_redirects=False,
            timeout=HTTP_TIMEOUT,
            headers={"Referer": page.url},
        )
        return self._follow(response)

    def _follow(self, response: requests.Response) -> requests.Response:
        for _ in range(20):
            if not response.is_redirect:
                return response
            url = urljoin(response.url, response.headers["Location"])
            self.visited.append(url)
            response = self.session.get(url, allow_redirects=False, timeout=HTTP_TIMEOUT)
        raise AssertionError(f"redirect loop: {self.visited[-20:]}")

    def visited_on(self, base: str, path: str = "") -> list[str]:
        """Visited URLs on the origin of ``base`` whose path starts with ``path``."""
        origin = urlsplit(base)
        return [
            u
            for u in self.visited
            if urlsplit(u).netloc == origin.netloc and urlsplit(u).path.startswith(path)
        ]


def kubelogin_id_token(
    server: OidcServer,
    account: str,
    *,
    client_id: str = CLUSTER_CLIENT_ID,
    ca_file: Path | None = None,
    extra_scopes: tuple[str, ...] = (),
) -> str:
    """Sign ``account`` in as ``kubectl oidc-login get-token`` does: the authorization code
    flow with PKCE for the public client, the code caught at the loopback redirect (not
    followed: nothing listens there), exchanged for tokens; returns the ID token."""
    session = requests.Session()
    # Per request, not on the session: REQUESTS_CA_BUNDLE would override the session's.
    verify: str | bool = str(ca_file) if ca_file else True
    verifier = secrets.token_urlsafe(48)
    challenge = (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    )
    state = secrets.token_urlsafe(16)
    query = {
        "client_id": client_id,
        "response_type": "code",
        "scope": " ".join(("openid", *extra_scopes)),  # kubelogin's --oidc-extra-scope
        "redirect_uri": KUBELOGIN_REDIRECT_URI,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": state,
        "nonce": secrets.token_urlsafe(16),
    }
    response = session.get(
        f"{server.issuer}/auth?{urlencode(query)}",
        allow_redirects=False,
        timeout=HTTP_TIMEOUT,
        verify=verify,
    )
    for _ in range(20):
        if response.is_redirect:
            target = urljoin(response.url, response.headers["Location"])
            if target.startswith(KUBELOGIN_REDIRECT_URI):
                got = parse_qs(urlsplit(target).query)
                assert got.get("state") == [state], target
                assert "code" in got, f"the provider refused: {target}\n{server.log()}"
                break
            response = session.get(
                target, allow_redirects=False, timeout=HTTP_TIMEOUT, verify=verify
            )
            continue
        forms = [f for f in parse_page(response.text).forms if f.method == "post"]
        assert forms, f"stuck at {response.url} ({response.status_code}):\n{response.text[:2000]}"
        url = urljoin(response.url, forms[0].action)
        response = session.post(
            url,
            data={**forms[0].fields, "login": account},
            allow_redirects=False,
            timeout=HTTP_TIMEOUT,
            verify=verify,
        )
    else:
        raise AssertionError(f"no code after 20 hops:\n{server.log()}")
    tokens = session.post(
        f"{server.issuer}/token",
        data={
            "grant_type": "authorization_code",
            "code": got["code"][0],
            "redirect_uri": KUBELOGIN_REDIRECT_URI,
            "client_id": client_id,
            "code_verifier": verifier,
        },
        timeout=HTTP_TIMEOUT,
        verify=verify,
    )
    assert tokens.status_code == 200, f"{tokens.text}\n{server.log()}"
    return str(tokens.json()["id_token"])
