"""The REST API over HTTP: bearer token, JSON or YAML bodies, pages followed, errors read
as RFC 9457 problem details."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import requests

API = "/api/v1"
TIMEOUT = 30


@dataclass
class ApiError(Exception):
    """An error the portal answered (problem details), or one reaching it."""

    status: int
    title: str
    detail: str = ""
    errors: dict[str, list[str]] = field(default_factory=dict)

    def __str__(self) -> str:
        text = f"{self.title} ({self.status})" if self.status else self.title
        if self.detail:
            text += f": {self.detail}"
        for where, messages in self.errors.items():
            for message in messages:
                text += f"\n  {where or '(document)'}: {message}"
        return text


def _error(response: requests.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    errors = body.get("errors") if isinstance(body.get("errors"), dict) else {}
    return ApiError(
        status=response.status_code,
        title=str(body.get("title") or response.reason or "Error"),
        detail=str(body.get("detail") or ""),
        errors={str(k): [str(m) for m in v] for k, v in (errors or {}).items()},
    )


class Client:
    """One portal, one token."""

    def __init__(self, url: str, token: str, session: requests.Session | None = None) -> None:
        self.url = url.rstrip("/")
        self.session = session or requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.headers["Accept"] = "application/json"
        self.session.headers["User-Agent"] = "portalctl"

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json: Any = None,
        data: bytes | None = None,
        content_type: str = "",
    ) -> Any:
        url = path if path.startswith("http") else f"{self.url}{API}{path}"
        headers = {"Content-Type": content_type} if content_type else {}
        try:
            response = self.session.request(
                method, url, params=params, json=json, data=data, headers=headers, timeout=TIMEOUT
            )
        except requests.RequestException as exc:
            raise ApiError(0, f"cannot reach {self.url}", str(exc)) from exc
        if response.status_code >= 400:
            raise _error(response)
        if response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise ApiError(response.status_code, "the portal did not answer JSON") from exc

    def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def items(self, path: str, params: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
        """Every item of a list, following its pages (``next``) when it has them."""
        body = self.get(path, params)
        while True:
            if isinstance(body, list):
                yield from body
                return
            yield from body.get("results", body.get("items", []))
            following = body.get("next")
            if not following:
                return
            body = self.get(following)
