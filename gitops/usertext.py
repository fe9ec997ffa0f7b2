"""Text people type, on its way into commit messages and forge pull requests.

A request's reason, an admin's approval note or a tenant's display name is copied into the
commit message of a change and, with a forge, into its pull request. Two kinds of reader do
more than show that text:

- git. ``git interpret-trailers`` (and every tool that reads trailers the way git does) takes
  ``Token: value`` lines of a message's last paragraph as trailers, and stops reading at a
  ``---`` line (git's patch divider, trailer.c ``find_patch_start``): a line of user text could
  pose as the portal's own ``Approved-by:`` or ``Change-Request:``.
- forges. A closing keyword before an issue reference ("Fixes #1", "closes owner/repo#1") in
  a pull request body, or in a commit that reaches the default branch, closes that issue
  (GitHub: "Linking a pull request to an issue"; Gitea's ``close|fix|resolve`` and ``reopen``
  keywords; GitLab's default closing pattern, which adds ``implement``); ``@name`` notifies a
  user or a whole team; ``#1``, ``!1`` and ``GH-1`` link and leave a cross-reference in the
  other issue; GitLab runs quick actions (``/merge``) written at the start of a line of a merge
  request description.

``user_text`` is the one way such text enters either. Invisible formatting characters
(Unicode's format category: bidi embeddings, overrides and isolates, zero-width characters)
are dropped, since they make a message display in another order than git, a forge and a
reviewer's terminal read it; the other line separators (NEL U+0085, U+2028, U+2029) become line
breaks and other control characters spaces. Multi-line text is quoted (``> `` on
every line, as e-mail and Markdown quote), so none of its lines can start a trailer, a patch
divider or a quick action wherever it lands; a single line is flattened, for titles and for
values inside the portal's own sentences. In both, a WORD JOINER (U+2060, invisible and
without a line break) goes after the first letter of a closing keyword and after the sigil of
a mention or reference, which no forge's parser reads through. ``defuse_forge_references`` is
that second step alone, for a whole pull request title and body as a last line of defence.
"""

from __future__ import annotations

import re
import unicodedata

WORD_JOINER = "\u2060"

# Control characters other than the line feed (C0, DEL and C1); a carriage return, NEL and the
# line and paragraph separators are line breaks first.
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_LINE_BREAKS = re.compile(r"\r\n?|[\x85\u2028\u2029]")
# "@name" and "@org/team", not the "@" of an e-mail address (forges need a non-word before it).
_MENTION = re.compile(r"(?<![\w.+-])@(?=\w)")
# "#12", "owner/repo#12" (GitHub, Gitea, GitLab issues), "!12" (GitLab merge requests).
_REFERENCE = re.compile(r"[#!](?=\d)")
# "GH-12": GitHub's other spelling of an issue reference.
_GH_REFERENCE = re.compile(r"\b(GH-)(?=\d)", re.IGNORECASE)
# Every closing (and Gitea's reopening) keyword of the three forges, as a whole word.
_KEYWORD = re.compile(
    r"\b(?=(?:clos(?:e[sd]?|ing)|fix(?:e[sd]|ing)?|resolv(?:e[sd]?|ing)"
    r"|implement(?:s|ed|ing)?|reopen(?:s|ed|ing)?)\b)(\w)",
    re.IGNORECASE,
)


def user_text(text: str, *, single_line: bool = False) -> str:
    """``text`` as it may appear in a commit message or a pull request.

    Multi-line: every line quoted with ``> `` (a blank line as ``>``), surrounding blank lines
    and trailing spaces dropped. ``single_line``: runs of whitespace, line breaks included,
    become one space. Either way invisible formatting characters and control characters go
    and forge references are defused. Empty text stays empty.
    """
    text = _CONTROL.sub(" ", _LINE_BREAKS.sub("\n", _visible(text)))
    if single_line:
        return defuse_forge_references(" ".join(text.split()))
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(f"> {defuse_forge_references(line)}" if line else ">" for line in lines)


def _visible(text: str) -> str:
    """``text`` without format characters (the word joiners ``defuse_forge_references`` adds
    included: it adds them again, after)."""
    return "".join(char for char in text if unicodedata.category(char) != "Cf")


def defuse_forge_references(text: str) -> str:
    """``text`` with closing keywords, mentions and issue references made inert.

    Idempotent: a defused text comes back unchanged.
    """
    text = _KEYWORD.sub(lambda m: m.group(1) + WORD_JOINER, text)
    text = _MENTION.sub("@" + WORD_JOINER, text)
    text = _REFERENCE.sub(lambda m: m.group(0) + WORD_JOINER, text)
    return _GH_REFERENCE.sub(lambda m: m.group(1) + WORD_JOINER, text)
