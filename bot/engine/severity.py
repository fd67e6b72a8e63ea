"""How bad a finding is, read from the reviewing bot's own markers (pure).

Each review bot says how much a comment matters in its own way: CodeRabbit in a badge line at the
top (`_⚠️ Potential issue_ | _🟠 Major_`, `_🛠️ Refactor suggestion_`, `_🧹 Nitpick_`), Gemini Code
Assist with a priority image (`.../codereviewagent/high-priority.svg`), Codex with a shields.io
badge (`![P1 Badge](https://img.shields.io/badge/P1-orange...)`), people with a `nit:` prefix.
Reading those lets a run converge when only nits are left (`convergence.block_on`) instead of
chasing every "previously missed" remark a re-review surfaces.

The scale, most severe first: critical > major > minor > nit. A comment with no marker takes its
reviewer's default (`bot.reviewers.default_severity`).
"""

from __future__ import annotations

import re

SEVERITIES = ("critical", "major", "minor", "nit")  # most severe first
_RANK = {name: len(SEVERITIES) - i for i, name in enumerate(SEVERITIES)}

# Explicit levels, most specific first: the first pattern found in the comment decides.
_MARKERS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p, re.IGNORECASE), s) for p, s in (
    # CodeRabbit's level badge, after its kind badge: `_⚠️ Potential issue_ | _🔴 Critical_`.
    (r"_\s*🔴\s*critical\s*_", "critical"),
    (r"_\s*🟠\s*major\s*_", "major"),
    (r"_\s*🟡\s*minor\s*_", "minor"),
    (r"_\s*🔵\s*trivial\s*_", "nit"),
    # Gemini Code Assist's priority image.
    (r"codereviewagent/critical\.svg", "critical"),
    (r"codereviewagent/high-priority\.svg", "major"),
    (r"codereviewagent/medium-priority\.svg", "minor"),
    (r"codereviewagent/low-priority\.svg", "nit"),
    # Codex's P0-P3 badge.
    (r"!\[P0 Badge\]|img\.shields\.io/badge/P0-", "critical"),
    (r"!\[P1 Badge\]|img\.shields\.io/badge/P1-", "major"),
    (r"!\[P2 Badge\]|img\.shields\.io/badge/P2-", "minor"),
    (r"!\[P3 Badge\]|img\.shields\.io/badge/P3-", "nit"),
    # CodeRabbit's kind badge alone (its older comments carry no level badge).
    (r"_\s*🧹\s*nitpick[^_\n]*_", "nit"),
    (r"_\s*🛠️?\s*refactor suggestion\s*_", "minor"),
    (r"_\s*⚠️?\s*potential issue\s*_", "major"),
))
# A person's (or a bot's) own "nit:" / "nitpick:" at the start of the comment.
_NIT_PREFIX = re.compile(r"^\s*(?:\*\*|_)?\s*(?:nit|nitpick|nits)\s*(?:\*\*|_)?\s*[:(\-]", re.IGNORECASE)
# A GitHub suggestion block: a ready-made change of a few lines, by nature a small one.
_SUGGESTION = re.compile(r"^\s*(`{3,}|~{3,})\s*suggestion\b", re.IGNORECASE | re.MULTILINE)
SUGGESTION_SEVERITY = "minor"


def rank(severity: str) -> int:
    """Higher is more severe; an unknown name ranks as "major" (a typo never silences a finding)."""
    return _RANK.get(severity, _RANK["major"])


def marked(body: str) -> str | None:
    """The severity the comment's own markers give, or None when it carries none."""
    for pattern, severity in _MARKERS:
        if pattern.search(body):
            return severity
    if _NIT_PREFIX.match(body):
        return "nit"
    if _SUGGESTION.search(body):
        return SUGGESTION_SEVERITY
    return None


def of(body: str, default: str) -> str:
    """The comment's severity: its own marker, else its reviewer's `default`."""
    return marked(body) or (default if default in _RANK else "major")


def blocks(severity: str, block_on: str) -> bool:
    """Whether a finding of `severity` holds convergence back under `convergence.block_on`."""
    return rank(severity) >= rank(block_on)


def most(severities) -> str:
    """The most severe of `severities` ("nit" for none): a group of findings is as bad as its worst."""
    return max(severities, key=rank, default="nit")
