"""django-allauth adapters: who may sign up, and group sync on every SSO sign-in."""

from __future__ import annotations

from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.http import HttpRequest

from tenants.groups import groups_from_claims
from tenants.services import accept_invitations, do_sync_identity_groups


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        # Local accounts are created by platform admins; SSO users are provisioned on sign-in.
        return bool(settings.PORTAL_LOCAL_SIGNUP)

    def login(self, request: HttpRequest, user: Any) -> None:
        # Every sign-in, with a password or through the identity provider (allauth calls this
        # for both, after the account and its addresses are saved): take up the invitations
        # to an address the user holds verified.
        super().login(request, user)
        accept_invitations(user)

    def confirm_email(self, request: HttpRequest, email_address: Any) -> bool:
        confirmed = bool(super().confirm_email(request, email_address))
        if confirmed and getattr(email_address.user, "is_active", False):
            accept_invitations(email_address.user)
        return confirmed


def _sync_from(sociallogin: Any) -> None:
    extra = sociallogin.account.extra_data or {}
    groups = groups_from_claims(
        extra.get("id_token") or {}, extra.get("userinfo") or {}, claim=settings.OIDC_GROUPS_CLAIM
    )
    do_sync_identity_groups(sociallogin.user, groups, prefix=settings.OIDC_GROUP_PREFIX)


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin: Any) -> bool:
        return True

    def pre_social_login(self, request: HttpRequest, sociallogin: Any) -> None:
        # Runs on every sign-in; a returning user is already saved, so sync now. A new user
        # is synced in save_user, once it has a primary key.
        super().pre_social_login(request, sociallogin)
        if sociallogin.is_existing:
            _sync_from(sociallogin)

    def save_user(self, request: HttpRequest, sociallogin: Any, form: Any = None) -> Any:
        user = super().save_user(request, sociallogin, form)
        _sync_from(sociallogin)
        return user
