"""The finding type the repository checks (isolation, capacity) report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One rule broken by one file or object.

    ``object`` reads ``Kind/namespace/name`` (``Kind/name`` when cluster-scoped, empty for a
    finding about a path). A ``warning`` is shown to reviewers but does not fail the check.
    """

    path: str
    object: str
    rule: str
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.path, self.object) if part)
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{prefix}{where}: [{self.rule}] {self.message}"


def mapping(value: Any) -> dict[str, Any]:
    """``value`` if it is a mapping, else an empty one: manifests are user input, and a
    malformed field must give a finding, not a crash."""
    return value if isinstance(value, dict) else {}


def sequence(value: Any) -> list[Any]:
    """``value`` if it is a list, else an empty one (see ``mapping``)."""
    return value if isinstance(value, list) else []


def object_ref(obj: Any) -> str:
    """``Kind/namespace/name`` for messages; tolerant of malformed objects."""
    if not isinstance(obj, dict):
        return "?"
    metadata = mapping(obj.get("metadata"))
    kind = str(obj.get("kind") or "?")
    name = str(metadata.get("name") or "?")
    namespace = metadata.get("namespace")
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
