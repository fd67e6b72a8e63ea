"""How bad a finding is, read from the reviewing bot's own markers (pure).

Each review bot says how much a comment matters in its own way: CodeRabbit in a badge line at the
top (`_⚠️ Potential issue_ | _🟠 Major_`, `_🛠️ Refactor suggestion_`, `_🧹 Nitpick_`), Gemini Code
Assist with a priority image (`.../codereviewagent/high-priority.svg`), Codex with a shields.io
badge (`![P1 Badge](https://img.shields.io/badge/P1-orange...)`), Cursor Bugbot with a
`**High Severity**` line, people with a `nit:` prefix, and reviewers told to tag their findings
(Copilot under a repository's instructions, people pasting Codex CLI output) with a leading `P1:`
or `[P2]`.
Reading those lets a run converge when only nits are left (`convergence.block_on`) instead of
chasing every "previously missed" remark a re-review surfaces.

The scale, most severe first: critical > major > minor > nit. A comment with no marker takes its
reviewer's default (`bot.rules.reviewers.default_severity`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SEVERITIES = ("critical", "major", "minor", "nit")  # most severe first
_RANK = {name: len(SEVERITIES) - i for i, name in enumerate(SEVERITIES)}

# Only this much of a comment is read: every pattern below then runs in bounded time, whatever
# anyone posts (a thread's text reaches us from anyone who can comment on the PR).
MAX_CHARS = 8000

# Explicit levels: the most severe one found decides, so a quoted marker cannot lower a finding.
# A bot's level (CodeRabbit's level badge, Gemini's image, Codex's P-badge, Bugbot's severity line,
# a leading P-tag) comes first; the kind badge alone is read only when there is none (its older
# comments carry no level badge, and a newer `_⚠️ Potential issue_ | _🟡 Minor_` is minor, not
# major).
_LEVELS, _KINDS = ((tuple((re.compile(p, re.IGNORECASE | re.MULTILINE), s) for p, s in group)) for group in ((
    # CodeRabbit's level badge, after its kind badge: `_⚠️ Potential issue_ | _🔴 Critical_`.
    (r"_[ \t]*🔴[ \t]*critical[ \t]*_", "critical"),
    (r"_[ \t]*🟠[ \t]*major[ \t]*_", "major"),
    (r"_[ \t]*🟡[ \t]*minor[ \t]*_", "minor"),
    (r"_[ \t]*🔵[ \t]*trivial[ \t]*_", "nit"),
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
    # Cursor Bugbot's level, a bold line of its own under the title: `**Medium Severity**`
    # (tests/fixtures/reviews/bugbot.json). On the same scale as Gemini's images: high = major,
    # medium = minor, low = nit. Without it, every Bugbot finding took its reviewer's default.
    (r"^[ \t]*\*\*[ \t]*critical[ \t]+severity[ \t]*\*\*[ \t]*$", "critical"),
    (r"^[ \t]*\*\*[ \t]*high[ \t]+severity[ \t]*\*\*[ \t]*$", "major"),
    (r"^[ \t]*\*\*[ \t]*medium[ \t]+severity[ \t]*\*\*[ \t]*$", "minor"),
    (r"^[ \t]*\*\*[ \t]*low[ \t]+severity[ \t]*\*\*[ \t]*$", "nit"),
), (
    # CodeRabbit's kind badge alone.
    (r"_[ \t]*🧹[ \t]*nitpick[^_\n]*_", "nit"),
    (r"_[ \t]*🛠️?[ \t]*refactor suggestion[ \t]*_", "minor"),
    (r"_[ \t]*⚠️?[ \t]*potential issue[ \t]*_", "major"),
)))
# A person's (or a bot's) own "nit:" / "nitpick:" at the start of the comment. `[ \t]`, never
# `\s`, and one optional markup group between the runs of blanks: two `\s*` side by side over a
# run of newlines backtrack quadratically (cubically under MULTILINE).
_NIT_PREFIX = re.compile(r"[ \t]*(?:(?:\*\*|_)[ \t]*)?(?:nit|nitpick|nits)[ \t]*(?:(?:\*\*|_)[ \t]*)?[:(\-]",
                         re.IGNORECASE)
# A level its reviewer wrote as the comment's first word: `P0 security: ...`, `P1: ...`,
# `P2 (nit): ...` (Copilot, where a repository's .github/copilot-instructions.md asks for P0-P3
# tags: tests/fixtures/reviews/copilot.json), `[P2] Title` (Codex's own tag, as people paste it).
# Only at the very start, and only a short word or parenthesis between the tag and its colon, so
# "P1 of the plan is done" or a P2 further down is not read as a level. A "(nit)" after the tag is
# the reviewer's own word for it.
_P_PREFIX = re.compile(r"[ \t]*(?:\*\*[ \t]*)?(?:\[P([0-3])\]|P([0-3])(?:[ \t]+(?:\(([a-z]{1,12})\)|([a-z][a-z-]{0,20})))?"
                       r"[ \t]*(?:\*\*)?[ \t]*:)", re.IGNORECASE)
_P_LEVELS = ("critical", "major", "minor", "nit")
# A GitHub suggestion block: a ready-made change of a few lines, by nature a small one.
_SUGGESTION = re.compile(r"^[ \t]*(?:`{3,}|~{3,})[ \t]*suggestion\b", re.IGNORECASE | re.MULTILINE)
SUGGESTION_SEVERITY = "minor"
# What a comment quotes rather than says, removed before its markers are read: code fences (an
# unclosed one runs to the end, as Markdown renders it), folded `<details>` (CodeRabbit's "Prompt
# for AI Agents", a committable suggestion), HTML comments and inline code. A suggestion that
# quotes `# _🔵 Trivial_` does not make a high-priority comment a nit.
_QUOTED = tuple(re.compile(p, re.IGNORECASE | re.DOTALL | re.MULTILINE) for p in (
    r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]*\1|\Z)",
    r"<details\b.*?(?:</details>|\Z)",
    r"<!--.*?(?:-->|\Z)",
    r"`[^`\n]*`",
))


def rank(severity: str) -> int:
    """Higher is more severe; an unknown name ranks as "major" (a typo never silences a finding)."""
    return _RANK.get(severity, _RANK["major"])


def said(body: str) -> str:
    """The comment's own words: its first `MAX_CHARS`, without what it quotes (`_QUOTED`)."""
    text = body[:MAX_CHARS]
    for pattern in _QUOTED:
        text = pattern.sub(" ", text)
    return text


def marked(body: str) -> str | None:
    """The severity the comment's own markers give, or None when it carries none."""
    text = said(body)
    tagged = _tagged(text)
    for markers in (_LEVELS, _KINDS):
        found = [s for pattern, s in markers if pattern.search(text)] + ([tagged] if tagged else [])
        if found:
            return most(found)
    if _NIT_PREFIX.match(text):
        return "nit"
    return None


def _tagged(text: str) -> str | None:
    """The level of a leading `P1:` / `[P2]` tag, None without one."""
    m = _P_PREFIX.match(text)
    if not m:
        return None
    if (m.group(3) or m.group(4) or "").lower() in ("nit", "nits", "nitpick"):
        return "nit"
    return _P_LEVELS[int(m.group(1) or m.group(2))]


def of(body: str, default: str) -> str:
    """The comment's severity: its own marker, else its reviewer's `default`.

    A suggestion block alone says the change is small, not that the reviewer cares less: it can
    raise a lower default to "minor", never lower the reviewer's own default.
    """
    found = marked(body)
    if found:
        return found
    default = default if default in _RANK else "major"
    if _SUGGESTION.search(body[:MAX_CHARS]) and rank(SUGGESTION_SEVERITY) > rank(default):
        return SUGGESTION_SEVERITY
    return default


def blocks(severity: str, block_on: str) -> bool:
    """Whether a finding of `severity` holds convergence back under `convergence.block_on`."""
    return rank(severity) >= rank(block_on)


def most(severities: Iterable[str]) -> str:
    """The most severe of `severities` ("nit" for none): a group of findings is as bad as its worst."""
    return max(severities, key=rank, default="nit")
