"""Names that end up in Kubernetes: one place checks them."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

from gitops.fleet import base_fleet
from gitops.render.validate import reserved_name_problem, text_problem

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A tenant slug becomes a namespace and a prefix of other names (queues, releases,
# `<slug>-<cluster>`), so it is kept well under the 63-character label limit.
TENANT_SLUG_MAX = 40
# Words of the portal's own URLs (``/tenants/new/``, ``/admin/``); the names the cluster
# reserves are the fleet's (``gitops.render.validate.reserved_name_problem``).
PORTAL_WORDS = frozenset({"admin", "new"})


def validate_dns1123_label(value: str, *, max_length: int = 63) -> None:
    """Raise ValidationError unless ``value`` is an RFC 1123 DNS label of at most max_length."""
    if not isinstance(value, str) or not value:
        raise ValidationError("A name is required.", code="required")
    if len(value) > max_length:
        raise ValidationError(
            f"Must be at most {max_length} characters (this one has {len(value)}).",
            code="max_length",
        )
    if not DNS1123_LABEL.fullmatch(value):
        raise ValidationError(
            "Use lower-case letters, digits and '-', starting and ending with a letter or digit "
            "(a Kubernetes DNS-1123 label).",
            code="dns1123",
        )


def validate_tenant_slug(value: str) -> None:
    """A DNS label the portal and the fleet leave free: not a word of the portal's URLs, and
    not the namespace of a platform component, as the configured fleet names them (the
    renderer refuses the same names, so a tenant made here can always be rendered)."""
    validate_dns1123_label(value, max_length=TENANT_SLUG_MAX)
    if value in PORTAL_WORDS:
        raise ValidationError(
            f"The name {value!r} is reserved: the portal's own pages use it.", code="reserved"
        )
    problem = reserved_name_problem(value, base_fleet())
    if problem:
        raise ValidationError(problem, code="reserved")


def validate_single_line(value: str) -> None:
    """Text that is rendered into manifests (display name, cost centre): no line breaks, other
    control characters or invisible formatting characters (bidi overrides), the rule the
    renderers apply (``gitops.render.validate.text_problem``), so a value saved here never
    breaks a later preview or approval of the tenant."""
    if isinstance(value, str) and (problem := text_problem(value)):
        raise ValidationError(f"May not contain {problem}.", code="control")


def validate_text(value: str) -> None:
    """Text of several lines people read on pages and in commit messages (a request's
    reason): line breaks are fine, other control characters and invisible formatting
    characters (bidi overrides, which show it in another order than it is stored) are not."""
    if isinstance(value, str) and (problem := text_problem(value, multi_line=True)):
        raise ValidationError(f"May not contain {problem}.", code="control")
