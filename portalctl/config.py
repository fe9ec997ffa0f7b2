"""Where portalctl keeps the portal's address and the token: a JSON file readable by its
owner only (``$PORTALCTL_CONFIG``, else ``~/.config/portalctl/config.json``). The
environment wins over the file (``PORTAL_URL``, ``PORTAL_TOKEN``), which is how a CI job
passes a secret without writing it to disk."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    """portalctl is not logged in, or its configuration cannot be read."""


@dataclass(frozen=True)
class Config:
    url: str
    token: str


def path() -> Path:
    given = os.environ.get("PORTALCTL_CONFIG")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "portalctl" / "config.json"


def save(config: Config) -> Path:
    target = path()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Created 0600 from the start, so the token is never readable by others, even briefly.
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"url": config.url, "token": config.token}, out)
    os.chmod(target, 0o600)
    return target


def load() -> Config:
    stored: dict[str, str] = {}
    target = path()
    if target.exists():
        try:
            stored = json.loads(target.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {target}: {exc}") from exc
    url = os.environ.get("PORTAL_URL") or stored.get("url", "")
    token = os.environ.get("PORTAL_TOKEN") or stored.get("token", "")
    if not url or not token:
        raise ConfigError(
            "not logged in: run `portalctl login --url URL` (or set PORTAL_URL and PORTAL_TOKEN)"
        )
    return Config(url.rstrip("/"), token)
