"""User text in commit messages and pull requests: no forged trailers, no forge actions.

Trailers are read back with the real ``git interpret-trailers --parse``; forge actions are
checked with the patterns the forges document: GitHub's and Gitea's closing keywords, GitLab's
default ``issue_closing_pattern`` (with ``#\\d+`` for ``%{issue_ref}``, as its admin guide
says to test it), mentions and issue or merge request references.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from gitops.repo import format_message
from gitops.usertext import WORD_JOINER, defuse_forge_references, user_text
from tests.support.text import BIDI, OTHER_INVISIBLE, SEPARATORS, refused_params

# GitHub ("Linking a pull request to an issue") and Gitea (close/fix/resolve, reopen).
GITHUB_CLOSING = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?|reopen(?:s|ed)?):?\s+"
    r"(?:[\w.-]+/[\w.-]+)?#\d+|\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+https?://",
    re.IGNORECASE,
)
# GitLab's documented default issue_closing_pattern.
GITLAB_CLOSING = re.compile(
    r"\b((?:[Cc]los(?:e[sd]?|ing)|\b[Ff]ix(?:e[sd]|ing)?|\b[Rr]esolv(?:e[sd]?|ing)"
    r"|\b[Ii]mplement(?:s|ed|ing)?)(:?) +(?:(?:issues? +)?#\d+(?:(?:, *| +and +)?)"
    r"|([A-Z][A-Z0-9_]+-\d+))+)"
)
MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9]")
REFERENCE = re.compile(r"(?:[#!]|\bGH-)\d", re.IGNORECASE)
QUICK_ACTION = re.compile(r"^/\w", re.MULTILINE)

INJECTIONS = [
    "\n\nApproved-by: Mallory <m@x>\nChange-Request: 999",
    # git stops looking for trailers at a "---" line: the real ones below would be lost.
    "fine\n---\nApproved-by: Mallory <m@x>\nChange-Request: 999\n",
    "ok\n\nSigned-off-by: Mallory <m@x>\n(cherry picked from commit 0123456789abcdef)",
    "Approved-by :Mallory\r\nChange-Request:999\r\n",
    "  Approved-by: indented\n\tChange-Request: 999",
]
ACTIONS = [
    "Fixes #1 @admins",
    "closes ai-factory/fleet#12, resolves GH-3 and fixed: #4",
    "Closing #5 and #6; implements PROJ-7. cc @org/platform-team (@root)",
    "Fixes https://github.com/ai-factory/fleet/issues/8\n/merge\n/approve",
    "Resolves: !9 REOPENED #10",
]


def parse_trailers(message: str) -> list[str]:
    result = subprocess.run(
        ["git", "interpret-trailers", "--parse"],
        input=message,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


def active_forge_actions(text: str) -> list[str]:
    found = []
    for pattern in (GITHUB_CLOSING, GITLAB_CLOSING, MENTION, REFERENCE, QUICK_ACTION):
        found += [m.group(0) for m in pattern.finditer(text)]
    return found


@pytest.mark.parametrize("text", INJECTIONS)
def test_no_line_of_user_text_is_read_as_a_trailer(text: str) -> None:
    trailers = {"Change-Request": "5", "Approved-by": "Pam <pam@example.com>"}
    body = "Reason given by the requester:\n" + user_text(text)

    message = format_message("Grant GPUs to alpha", body, trailers)

    assert parse_trailers(message) == ["Change-Request: 5", "Approved-by: Pam <pam@example.com>"]
    # Nor when it is the message's last paragraph (a forge's squash message, no trailers).
    assert parse_trailers(format_message("Grant GPUs", user_text(text))) == []


def test_it_quotes_every_line_and_keeps_the_text_readable() -> None:
    quoted = user_text("\n\n  first line  \r\n\r\nsecond\x00 line\r\n\n")

    assert quoted == ">   first line\n>\n> second  line"
    assert user_text(" \n ") == ""


def test_it_flattens_single_line_text() -> None:
    assert user_text("Team\n\nApproved-by: x\r\n\tAlpha", single_line=True) == (
        "Team Approved-by: x Alpha"
    )


@pytest.mark.parametrize("text", ACTIONS)
def test_it_defuses_closing_keywords_mentions_and_references(text: str) -> None:
    assert active_forge_actions(text), "the sample must be active to begin with"

    for safe in (user_text(text), user_text(text, single_line=True)):
        assert active_forge_actions(safe) == []
        # Only invisible word joiners were added: the text reads as it was typed.
        assert safe.replace(WORD_JOINER, "") in (
            "\n".join(f"> {line}" for line in text.split("\n")),
            " ".join(text.split()),
        )


def test_it_leaves_e_mail_addresses_and_plain_numbers_alone() -> None:
    text = "mail ops@example.com about 12 GPUs"
    assert defuse_forge_references(text) == text


def test_defusing_twice_changes_nothing() -> None:
    once = defuse_forge_references(" ".join(ACTIONS))
    assert defuse_forge_references(once) == once


def test_format_message_quotes_body_lines_git_would_read_as_trailers() -> None:
    # Text that reached format_message without user_text (an older change's description).
    raw = "Why: because\nApproved-by: Mallory <m@x>\n---\nChange-Request: 999\nplain line"

    message = format_message("Title", raw, {"Change-Request": "5"})

    assert parse_trailers(message) == ["Change-Request: 5"]
    assert message == (
        "Title\n\n"
        "> Why: because\n> Approved-by: Mallory <m@x>\n> ---\n> Change-Request: 999\n"
        "plain line\n\n"
        "Change-Request: 5\n"
    )
    assert parse_trailers(format_message("Title", raw)) == []


@pytest.mark.parametrize("char", refused_params([*BIDI, *OTHER_INVISIBLE]))
def test_it_drops_invisible_formatting_characters(char: str) -> None:
    # A commit message reads in git, a forge and a terminal as it is stored, not reordered.
    assert user_text(f"user{char} admin", single_line=True) == "user admin"
    assert user_text(f"user{char} admin") == "> user admin"


@pytest.mark.parametrize("char", refused_params(SEPARATORS))
def test_the_other_line_separators_are_line_breaks_and_quoted(char: str) -> None:
    text = f"fine{char}Approved-by: Mallory <m@x>"
    assert user_text(text) == "> fine\n> Approved-by: Mallory <m@x>"
    assert user_text(text, single_line=True) == "fine Approved-by: Mallory <m@x>"
    message = format_message("Grant GPUs", "Reason:\n" + user_text(text), {"Change-Request": "5"})
    assert parse_trailers(message) == ["Change-Request: 5"]


def test_its_own_word_joiners_survive_a_second_pass() -> None:
    once = user_text("fixes #12 for @ops", single_line=True)
    assert user_text(once, single_line=True) == once
    assert active_forge_actions(once) == []
