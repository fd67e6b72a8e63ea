"""Findings: their fingerprints, severities, twins and history (pure).

A finding's fingerprint is its path and its normalised text, never its line: a comment repeated
after the code moved is the same question. The text is normalised of the bots' boilerplate
(badges, priority images, "Prompt for AI agents" sections, hidden HTML comments), so the same
remark made again, or by another bot, is recognised (docs/architecture.md, "Findings").
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import cast

from bot.rules import severity as sev
from bot.rules.model import Adjudication, Finding, Review, Settled, Thread, known_fields

_SPACE = re.compile(r"\s+")
DECLINE_WORDS = ("decline", "declined", "won't fix", "wont fix", "wontfix", "ignore", "not applicable")

# Boilerplate the bots wrap around what they mean, removed before comparing texts: whole blocks
# first, then lines.
_BLOCKS = tuple(re.compile(p, re.IGNORECASE | re.DOTALL) for p in (
    # An unclosed one runs to the end: each opener then scans the text once, not once per opener.
    r"<!--.*?(?:-->|\Z)",  # hidden state (CodeRabbit's fingerprints, our own reply marker)
    r"<details>.*?(?:</details>|\Z)",  # "🤖 Prompt for AI Agents", "📝 Committable suggestion", tool output
    r"!\[[^\]]*\]\([^)]*\)",  # badges and priority images
))
# `[ \t]`, never `\s`, after `^`: under MULTILINE a `\s*` runs on over the following blank lines
# from every line start, and two of them side by side made 2,000 newlines take 22 s (cubic).
_LINES = tuple(re.compile(p, re.IGNORECASE | re.MULTILINE) for p in (
    # CodeRabbit's `_⚠️ Potential issue_ | _🟠 Major_` line: each badge starts with its emoji, so
    # a person's `_this deletes the auth check_` keeps its words (the markup goes below).
    r"^[ \t]*_[^\x00-\x7f][^_\n]*_(?:[ \t]*\|[ \t]*_[^\x00-\x7f][^_\n]*_)*[ \t]*$",
    r"^[ \t]*useful\? react with.*$",  # Codex's footer
    # Bugbot's footer names the commit it reviewed: with it, the same finding posted again after
    # a push printed anew, and a decline of it was never carried over
    # (tests/fixtures/reviews/bugbot.json).
    r"^[ \t]*(?:<sup>[ \t]*)?reviewed by \[cursor bugbot\].*$",
    # Copilot's "This issue also appears on line 62 of the same file." (or a list of lines):
    # line numbers, which move with the code, while a print is of the question, never its line.
    r"^[ \t]*this issue also appears (?:on line \d+ of the same file\.?"
    r"|in the following locations of the same file:(?:\n[ \t]*[-*][ \t]+line \d+)*)[ \t]*$",
    r"</?[a-z][^<>\n]*>",  # any other HTML tag (<sub>, <summary>, ...)
    r"^[ \t]*(?:(?:\*\*|_)[ \t]*)?(?:nit|nitpick|nits)[ \t]*(?:(?:\*\*|_)[ \t]*)?:",  # a "nit:" prefix
))
_MARKUP = re.compile(r"[*_`>#|~]+")
_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_TOKEN = re.compile(r"[a-z0-9]+(?:[._][a-z0-9]+)*")
_STOP = frozenset("a an and are as at be by can for from has have if in is it its of on or so that the "
                  "this to was we when which will with would you your".split())

# Two findings are one when they are on the same file, their lines at most this far apart, and
# their prints are equal or their normalised texts share at least this share of their words
# (token Jaccard similarity). 0.8 means near-duplicates only: "missing null check before
# dereferencing `user`" and "missing bounds check before indexing `user`" score 0.5 and are two
# bugs. Merging two different findings loses one (its thread is answered "Fixed"); missing a
# pair only costs the fixer reading the same thing twice.
GROUP_LINES = 3
GROUP_SIMILARITY = 0.8
# A text that normalises to less than this (an image, `_Typo_` stripped to nothing) is printed
# from its raw body instead: otherwise every such comment on a file would share one print.
MIN_PRINT_CHARS = 12


def fingerprint(*parts: str | None) -> str:
    """Stable across rounds: the same question about the same file gets the same print."""
    text = "\x1f".join(_SPACE.sub(" ", (p or "").strip().lower()) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def normalised(body: str) -> str:
    """What a comment says, without the bot's wrapping, markup, case or spacing."""
    text = body[:sev.MAX_CHARS]  # bounded work for any input: the print keeps 500 characters
    for pattern in (*_BLOCKS, *_LINES):
        text = pattern.sub(" ", text)
    return _SPACE.sub(" ", _MARKUP.sub(" ", text)).strip().lower()


@functools.lru_cache(maxsize=4096)
def words(body: str) -> frozenset[str]:
    return frozenset(w for w in _TOKEN.findall(normalised(body)) if w not in _STOP)


def similarity(a: str, b: str) -> float:
    """Token Jaccard similarity of two comments' normalised texts (0..1)."""
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


def printed(body: str) -> str:
    """The text a print is made of: the normalised text, or the raw body when that says too little."""
    text = normalised(body)
    return (text if len(text) >= MIN_PRINT_CHARS else body[:sev.MAX_CHARS])[:500]


def thread_fingerprint(path: str | None, body: str) -> str:
    return fingerprint("thread", path, printed(body))


def from_threads(threads: tuple[Thread, ...], default_severity: Callable[[str | None], str] = lambda _: "major",
                 ) -> tuple[Finding, ...]:
    """Unresolved, non-outdated review threads: what is still actionable on this head, each with
    the severity its own markers give (else its reviewer's default)."""
    return tuple(
        Finding(
            thread_id=t.id, comment_id=t.comment_id, path=t.path, line=t.line, body=t.body,
            author=t.author, fingerprint=thread_fingerprint(t.path, t.body), answered=t.replied,
            severity=sev.of(t.body, default_severity(t.author)),
        )
        for t in threads
        if not t.is_resolved and not t.is_outdated
    )


def from_review_body(review: Review) -> tuple[Finding, ...]:
    """A review that asks for changes in its body alone (no threads) is one finding: a change
    request blocks as "major" unless its own text marks it otherwise."""
    if review.state != "CHANGES_REQUESTED" or not review.body.strip():
        return ()
    body = review.body.strip()
    return (Finding(thread_id=None, comment_id=None, path=None, line=None, body=body,
                    author=review.user, fingerprint=fingerprint("review", printed(body)),
                    severity=sev.of(body, "major")),)


# -- twins: one finding raised by several reviewers ------------------------------------------


def code_named(body: str) -> frozenset[str]:
    """The inline code a comment names (`x`, `mean([])`), outside its hidden and folded parts."""
    text = body[:sev.MAX_CHARS]
    for pattern in _BLOCKS:
        text = pattern.sub(" ", text)
    return frozenset(c.strip().lower() for c in _CODE.findall(text) if c.strip())


def _near(a: Finding, b: Finding) -> bool:
    if not a.path or a.path != b.path or (a.author or "").lower() == (b.author or "").lower():
        return False
    if a.line is not None and b.line is not None and abs(a.line - b.line) > GROUP_LINES:
        return False
    if a.fingerprint == b.fingerprint:
        return True
    # Two texts alike but naming different code ("missing type hint for `a`" and "... for `b`")
    # are two findings: the words say the kind of problem, the code says which one.
    ca, cb = code_named(a.body), code_named(b.body)
    if ca and cb and not ca & cb:
        return False
    return similarity(a.body, b.body) >= GROUP_SIMILARITY


def group(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Findings of different reviewers about the same lines and meaning, as one finding each.

    The group's finding is its most severe member's, carrying the group's worst severity, the
    other members' threads as `twins` and their own texts as `twin_texts`: the fixer reads every
    member's text under one finding, and answers each thread by its own id (bot/engine/fixing.py).
    """
    groups: list[list[Finding]] = []
    for f in findings:
        home = next((g for g in groups if f.thread_id and all(_near(f, m) for m in g)), None)
        if home is None:
            groups.append([f])
        else:
            home.append(f)
    out = []
    for members in groups:
        lead = max(members, key=lambda m: sev.rank(m.severity))
        rest = [m for m in members if m is not lead]
        if rest:
            lead = replace(lead, severity=sev.most(m.severity for m in members),
                           twins=tuple((_thread(m), m.author, m.answered, m.fingerprint) for m in rest),
                           twin_texts=tuple((_thread(m), m.path, m.line, m.body) for m in rest))
        out.append(lead)
    return tuple(out)


def _thread(member: Finding) -> str:
    # A group's members are on review threads: a finding without one (a review body's, a
    # check's) has no path, and `_near` groups none without.
    return cast(str, member.thread_id)


def threads_of(finding: Finding) -> tuple[Finding, ...]:
    """The finding once per thread it stands for (itself, then each twin's), for replies."""
    return (finding, *(replace(finding, thread_id=tid, comment_id=None, author=author, answered=answered,
                               fingerprint=fp, twins=())
                       for tid, author, answered, fp in finding.twins))


# -- carried over: settled in an earlier round of this run -------------------------------------


def carried_over(findings: tuple[Finding, ...], settled: dict[str, tuple[Settled, ...]]
                 ) -> tuple[tuple[Finding, ...], tuple[tuple[Finding, str], ...]]:
    """Split findings into (new, carried over with the reply that says where it was settled).

    A finding whose fingerprint was last declined in an earlier round is not the fixer's again:
    its thread is answered with a link to the decline, and resolved. Only a decline (a decision)
    is carried over: a fix the reviewer raises again is evidence it did not fix, so the repeat
    goes back to the fixer (fixed and raised again and again, it is churn, escalated as such).
    Any thread
    that was itself settled (under whatever print), reopened by someone, is a person disagreeing:
    it goes to the fixer (or escalation) as a new finding.
    """
    new: list[Finding] = []
    carried: list[tuple[Finding, str]] = []
    settled_threads = {s.thread_id for records in settled.values() for s in records if s.thread_id}
    for f in findings:
        records = settled.get(f.fingerprint)
        if (not records or records[-1].action != "declined" or not f.thread_id
                or f.thread_id in settled_threads):
            new.append(f)
            continue
        done = records[-1]
        why = f" ({done.reason})" if done.reason else ""
        carried.append((f, f"Already {done.action} in round {done.round_no}{why}: {done.url}"))
    return tuple(new), tuple(carried)


def settlements(answered: Iterable[tuple[Finding, str, str]], round_no: int, pr_url: str,
                pushed_head: str | None) -> tuple[Settled, ...]:
    """What a round's fixer settled, to answer repeats with: `(finding, action, reason)` for each
    finding it fixed or declined, every thread of a group under its own fingerprint. A fix links
    to the commit that made it, a decline to the thread that says why."""
    out = []
    for lead, action, reason in answered:
        if action not in ("fixed", "declined"):
            continue
        for f in threads_of(lead):
            thread = f"{pr_url}#discussion_r{f.comment_id}" if f.comment_id else pr_url
            url = f"{pr_url}/commits/{pushed_head}" if action == "fixed" and pushed_head else thread
            out.append(Settled(f.fingerprint, action, round_no, url, f.thread_id, reason.strip()[:200]))
    return tuple(out)


def settled_json(records: Iterable[Settled]) -> str:
    return json.dumps([r.__dict__ for r in records])


def settled_of(text: str | None) -> tuple[Settled, ...]:
    return tuple(Settled(**known_fields(Settled, r)) for r in json.loads(text)) if text else ()


def settled_index(records: Iterable[Settled]) -> dict[str, tuple[Settled, ...]]:
    """Every settlement of each fingerprint, oldest round first (the last is the latest): two
    threads with one text settled together both stay known as settled threads."""
    index: dict[str, tuple[Settled, ...]] = {}
    for s in sorted(records, key=lambda s: s.round_no):
        index[s.fingerprint] = (*index.get(s.fingerprint, ()), s)
    return index


# -- remembered answers ------------------------------------------------------------------------


def is_decline(answer: str) -> bool:
    head = answer.strip().lower()
    return any(head.startswith(word) for word in DECLINE_WORDS)


def attribution(adj: Adjudication) -> str:
    return f"@{adj.by} (answered {adj.at:%Y-%m-%d}): {adj.answer.strip()}"


def apply_adjudications(
    findings: tuple[Finding, ...], memory: dict[str, Adjudication]
) -> tuple[tuple[Finding, ...], tuple[str, ...], tuple[tuple[Finding, str], ...]]:
    """Split findings by remembered answers: (still for the fixer, instructions, declined).

    A remembered decline is replied to and resolved with attribution; any other remembered
    answer goes to the fixer as an instruction.
    """
    keep: list[Finding] = []
    instructions: list[str] = []
    declines: list[tuple[Finding, str]] = []
    for f in findings:
        adj = memory.get(f.fingerprint)
        if adj is None:
            keep.append(f)
        elif is_decline(adj.answer) and f.thread_id:
            declines.append((f, f"Declined per {attribution(adj)}"))
        else:
            keep.append(f)
            where = f"{f.path}:{f.line}" if f.path else "the review"
            instructions.append(f"On {where}, per {attribution(adj)}")
    return tuple(keep), tuple(instructions), tuple(declines)
