"""Encryption at rest for the few secrets the portal must read back (webhook signing secrets).

Fernet (AES-128-CBC with HMAC-SHA256, from ``cryptography``) under keys that live outside the
database: ``settings.PORTAL_ENCRYPTION_KEYS``. The first key encrypts and every key decrypts
(``MultiFernet``), so a key is rotated by putting a new one first, running ``manage.py
rotate_encryption_key`` (every row re-encrypted with it) and then dropping the old one. A dump
of the database alone gives no secret away.

Callers decrypt only where they need the plaintext: signing a delivery, showing a new secret
once.
"""

from __future__ import annotations

import base64
import functools
import hashlib

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class UndecryptableSecret(ValueError):
    """A stored value no configured key decrypts (its key was dropped, or it is not a token)."""


def demo_key(secret_key: str) -> str:
    """The key of a local run with none configured, derived from SECRET_KEY: demo-only (the
    embedded SECRET_KEY is public, so is this)."""
    digest = hashlib.sha256(b"portal.encryption:" + secret_key.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii")


def check_key(key: str) -> None:
    """Raise ValueError unless ``key`` is a Fernet key (32 url-safe base64-encoded bytes)."""
    Fernet(key.encode("ascii"))


@functools.lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key.encode("ascii")) for key in keys])


def _current() -> MultiFernet:
    return _fernet(tuple(settings.PORTAL_ENCRYPTION_KEYS))


def encrypt(text: str) -> str:
    """A token of ``text`` under the first key."""
    return _current().encrypt(text.encode("utf-8")).decode("ascii")


def decrypt(token: str) -> str:
    """The text of a token made under any configured key."""
    try:
        return _current().decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError) as exc:
        raise UndecryptableSecret(
            "A stored secret cannot be decrypted with any key in PORTAL_ENCRYPTION_KEYS "
            "(was its key removed before `manage.py rotate_encryption_key` ran?)."
        ) from exc


def rotate(token: str) -> str:
    """The same text as a token under the first key (a no-op in meaning, not in bytes)."""
    try:
        return _current().rotate(token.encode("ascii")).decode("ascii")
    except (InvalidToken, UnicodeError) as exc:
        raise UndecryptableSecret(
            "A stored secret cannot be decrypted with any key in PORTAL_ENCRYPTION_KEYS."
        ) from exc
