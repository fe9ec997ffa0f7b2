"""Characters no text people type may carry into a manifest or onto a page
(``gitops.render.validate.text_problem``), for the tests of every door text comes in by: the
forms, the API, the services and the renderers."""

from __future__ import annotations

from typing import Any

import pytest

# The bidi embeddings, overrides (U+202A-U+202E) and isolates (U+2066-U+2069).
BIDI = [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))]
# The line and paragraph separators and NEL: line breaks to YAML and JavaScript.
SEPARATORS = ["\u2028", "\u2029", "\x85"]
REFUSED = BIDI + SEPARATORS
# Other invisible format characters: zero-width space, joiner, non-joiner, word joiner, the
# byte order mark, the soft hyphen.
OTHER_INVISIBLE = ["\u200b", "\u200d", "\u200c", "\u2060", "\ufeff", "\u00ad"]


def codepoint(char: str) -> str:
    return f"U+{ord(char):04X}"


def refusal(char: str) -> str:
    """Words the refusal of text holding ``char`` has."""
    if char in SEPARATORS:
        return "control characters"
    return f"invisible formatting characters such as bidi overrides (it has {codepoint(char)})"


def refused_params(chars: list[str] = REFUSED) -> list[Any]:
    """``chars`` as pytest parameters named by their code points."""
    return [pytest.param(char, id=codepoint(char)) for char in chars]
