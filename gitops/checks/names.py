"""Kubernetes naming rules, as the API server applies them (k8s.io/apimachinery validation).

Each function returns a sentence describing the problem, or None when the value is valid, so
callers can attach it to whatever finding type they report. ``tenants.names`` checks the
portal's own, stricter policy for tenant slugs; this module checks what Kubernetes accepts.
"""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_LABEL)
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
# The name part of a label or annotation key, and a label value.
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

LABEL_MAX = 63
SUBDOMAIN_MAX = 253


def dns1123_label_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > LABEL_MAX:
        return f"must be at most {LABEL_MAX} characters (has {len(value)})"
    if not DNS1123_LABEL.fullmatch(value):
        return (
            f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return None


def dns1035_label_problem(value: object) -> str | None:
    problem = dns1123_label_problem(value)
    if problem is None and not DNS1035_LABEL.fullmatch(str(value)):
        return f"{value!r} is not a DNS-1035 label (it must start with a letter)"
    return problem


def dns1123_subdomain_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > SUBDOMAIN_MAX:
        return f"must be at most {SUBDOMAIN_MAX} characters (has {len(value)})"
    if not DNS1123_SUBDOMAIN.fullmatch(value):
        return (
            f"{value!r} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit)"
        )
    return None


def path_segment_problem(value: object) -> str | None:
    """RBAC objects only need a name usable as one URL path segment (e.g. ``system:foo``)."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if value in (".", ".."):
        return f"{value!r} may not be used as a name"
    if "/" in value or "%" in value:
        return f"{value!r} may not contain '/' or '%'"
    return None


def qualified_name_problem(value: object) -> str | None:
    """A label or annotation key: an optional DNS subdomain prefix and '/', then a name."""
    if not isinstance(value, str) or not value:
        return "a key must be a non-empty string"
    prefix, slash, name = value.rpartition("/")
    if slash:
        if not prefix:
            return f"key {value!r} has an empty prefix"
        problem = dns1123_subdomain_problem(prefix)
        if problem:
            return f"key {value!r} has a bad prefix: {problem}"
    if not name:
        return f"key {value!r} has an empty name part"
    if len(name) > LABEL_MAX:
        return f"key {value!r}: the name part must be at most {LABEL_MAX} characters"
    if not QUALIFIED_NAME.fullmatch(name):
        return (
            f"key {value!r}: the name part must be letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def label_value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"label value {value!r} must be a string (quote it in YAML)"
    if len(value) > LABEL_MAX:
        return f"label value {value!r} must be at most {LABEL_MAX} characters"
    if value and not QUALIFIED_NAME.fullmatch(value):
        return (
            f"label value {value!r} must be empty or letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None
