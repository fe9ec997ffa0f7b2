"""``Authorization: Bearer afp_...``: a DRF authentication class for API tokens.

An unknown, expired or revoked token is refused with a 401 (problem details and a
``WWW-Authenticate`` challenge), never treated as anonymous: a script whose token was revoked
learns it at once. The token that was recognised is kept on the request so the view logs the
call, a refused one included.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from api.models import ApiToken
from api.tokens import find_token

TOKEN_ATTRIBUTE = "api_token"


class TokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None  # not ours: the session may still sign the caller in
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "The Authorization header must be 'Bearer <token>'."
            )
        try:
            text = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("The token is not valid.") from None
        token = find_token(text)
        if token is None:
            raise exceptions.AuthenticationFailed("The token is not valid.")
        setattr(request._request, TOKEN_ATTRIBUTE, token)
        if token.revoked:
            raise exceptions.AuthenticationFailed("The token was revoked.")
        if token.expired:
            raise exceptions.AuthenticationFailed("The token has expired.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("The token's account is switched off.")
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return f'{self.keyword} realm="api"'


class TokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """The bearer scheme in the OpenAPI document."""

    target_class = "api.auth.TokenAuthentication"
    name = "token"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token, afp_<prefix>_<secret> (see the API tokens page).",
        }
