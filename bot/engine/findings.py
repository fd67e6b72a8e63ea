"""Findings and their fingerprints (pure)."""

from __future__ import annotations

import hashlib
import re

from bot.fixers.base import Finding

from .model import Adjudication, Review, Thread

_SPACE = re.compile(r"\s+")
DECLINE_WORDS = ("decline", "declined", "won't fix", "wont fix", "wontfix", "ignore", "not applicable")


def fingerprint(*parts: str | None) -> str:
    """Stable across rounds: the same question about the same file gets the same print."""
    text = "\x1f".join(_SPACE.sub(" ", (p or "").strip().lower()) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def from_threads(threads: tuple[Thread, ...]) -> tuple[Finding, ...]:
    """Unresolved, non-outdated review threads: what is still actionable on this head."""
    return tuple(
        Finding(
            thread_id=t.id, comment_id=t.comment_id, path=t.path, line=t.line, body=t.body,
            author=t.author, fingerprint=fingerprint("thread", t.path, t.body[:500]), answered=t.replied,
        )
        for t in threads
        if not t.is_resolved and not t.is_outdated
    )


def from_review_body(review: Review) -> tuple[Finding, ...]:
    """A review that asks for changes in its body alone (no threads) is one finding."""
    if review.state != "CHANGES_REQUESTED" or not review.body.strip():
        return ()
    body = review.body.strip()
    return (Finding(thread_id=None, comment_id=None, path=None, line=None, body=body,
                    author=review.user, fingerprint=fingerprint("review", body[:500])),)


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
