"""Names that end up in Kubernetes: one place checks them."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A tenant slug becomes a namespace and a prefix of other names (queues, releases,
# `<slug>-<cluster>`), so it is kept well under the 63-character label limit.
TENANT_SLUG_MAX = 40
RESERVED_SLUGS = frozenset(
    {"default", "kube-system", "kube-public", "kube-node-lease", "flux-system", "admin", "new"}
)


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
    validate_dns1123_label(value, max_length=TENANT_SLUG_MAX)
    if value in RESERVED_SLUGS or value.startswith(("kube-", "flux-")):
        raise ValidationError(f"'{value}' is reserved by the platform.", code="reserved")


def validate_single_line(value: str) -> None:
    """Text that is rendered into manifests (display name, cost centre): no line breaks or
    other control characters, the rule the renderers apply (``gitops.render.validate``), so a
    value saved here never breaks a later preview or approval of the tenant."""
    from gitops.render.validate import CONTROL_CHARS

    if isinstance(value, str) and CONTROL_CHARS.search(value):
        raise ValidationError(
            "May not contain line breaks or other control characters.", code="control"
        )
