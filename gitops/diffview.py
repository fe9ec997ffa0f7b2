"""Turning a change's file diffs into highlighted HTML for the review page."""

from __future__ import annotations

from dataclasses import dataclass

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

# Past this many lines a file's diff is summarised, not shown: a review page must stay fast.
MAX_LINES = 2000


@dataclass(frozen=True)
class RenderedFile:
    path: str
    status: str
    added: int
    removed: int
    html: str
    truncated: bool


def render_file_diff(path: str, status: str, patch: str) -> RenderedFile:
    lines = patch.splitlines()
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    truncated = len(lines) > MAX_LINES
    shown = "\n".join(lines[:MAX_LINES]) + "\n"
    # Pygments escapes the text: file contents never reach the page unescaped.
    html = highlight(shown, DiffLexer(), HtmlFormatter(nowrap=False, cssclass="diff-src"))
    return RenderedFile(path, status, added, removed, html, truncated)
