"""Reading settings from the environment.

Every setting the portal takes from outside goes through these helpers, so that a secret can
come from a file (``NAME_FILE``, as Docker and Kubernetes secrets are mounted) as well as from
the variable itself, and so that a malformed value fails at start-up with the variable named.
"""

from __future__ import annotations

import os
from pathlib import Path


class ImproperlyConfiguredEnv(ValueError):
    """An environment variable holds a value the portal cannot use."""


def env(name: str, default: str = "") -> str:
    """Return ``$NAME``, else the contents of the file named by ``$NAME_FILE``, else default.

    An empty variable counts as unset, so ``NAME= make demo`` falls back to the default.
    """
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfiguredEnv(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return default


def env_bool(name: str, default: bool = False) -> bool:
    raw = env(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfiguredEnv(f"{name}={raw!r} is not a boolean (use true or false)")


def env_int(name: str, default: int) -> int:
    raw = env(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfiguredEnv(f"{name}={raw!r} is not an integer") from exc


def env_list(name: str, default: list[str] | None = None) -> list[str]:
    """A comma-separated list; blanks are dropped."""
    raw = env(name, "")
    if not raw.strip():
        return list(default or [])
    return [item.strip() for item in raw.split(",") if item.strip()]
