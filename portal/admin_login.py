"""The Django admin's sign-in, throttled as the portal's own sign-in is.

Django's admin login checks any number of passwords. Here it goes through allauth's
``DefaultAccountAdapter.authenticate``, the same call allauth's login form makes: it spends the
``login_failed`` rate limit (ACCOUNT_RATE_LIMITS in portal/settings.py) under the same keys,
per client address and per account name, so a guess on either form counts against one budget;
once that is spent the attempt is refused before any password is checked, and a successful
sign-in gives back what it spent.
"""

from __future__ import annotations

from typing import Any

from allauth.account.adapter import get_adapter
from django.contrib.admin.forms import AdminAuthenticationForm


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    """AdminAuthenticationForm whose password check is allauth's, rate limit and all."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if username is not None and password:
            # Raises ValidationError ("Too many failed login attempts...") when the budget is
            # spent; the form shows it as it shows a wrong password.
            self.user_cache = get_adapter(self.request).authenticate(
                self.request, username=username, password=password
            )
            if self.user_cache is None:
                raise self.get_invalid_login_error()
            self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data
