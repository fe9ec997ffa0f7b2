"""Printing what the API answers: a table for people, JSON or YAML for programs."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import yaml

Column = tuple[str, Callable[[dict[str, Any]], Any]]


def dig(item: Any, *path: str) -> Any:
    """``item[path[0]][path[1]]...``, or "" where a step is missing."""
    for step in path:
        if not isinstance(item, dict):
            return ""
        item = item.get(step)
    return "" if item is None else item


def table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    cells = [[h for h, _ in columns]] + [[str(value(row)) for _, value in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def render(data: Any, fmt: str, columns: Sequence[Column] = ()) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    if fmt == "yaml":
        if isinstance(data, list):
            return yaml.safe_dump_all(data, sort_keys=False, explicit_start=True).rstrip()
        return yaml.safe_dump(data, sort_keys=False).rstrip()
    rows = data if isinstance(data, list) else [data]
    return table(rows, columns)
