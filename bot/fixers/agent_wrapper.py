"""A preset's verdict when the agent printed none: read from its final message and its commit (pure).

An agent CLI run by a preset does not know the verdict protocol, so the bot infers one:
- `addressed` when the run left a change (the commit the bot made or took);
- `needs_input` when the final message asks a question the maintainers must answer;
- `converged` when nothing changed and the message says nothing needed changing;
- otherwise `addressed` without a change: the finished no-advance the engine already knows.
The summary is the final message, capped. An agent that did print a verdict line (it followed
the prompt's instructions) is taken at its word instead (bot/fixers/command.py).

Threads: a finding's thread is answered `fixed` only when the pushed commit changed its file
and the message does not single it out as left undone; every other thread is left unanswered,
for the next review to judge. Resolving a thread is a claim; free text backs it only that far.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import replace

from bot.fixers.base import ADDRESSED, CONVERGED, NEEDS_INPUT, Verdict
from bot.fixers.reports import tail as _tail
from bot.rules.model import Finding

# "Nothing needed changing", said in the ways agents say it.
_NOTHING_NEEDED = re.compile(
    r"\b(no (code |file )?changes? (is |are |were |was )?(needed|necessary|required)"
    r"|no (action|fix|edits?) (is |was )?(needed|necessary|required)"
    r"|nothing (needed|needs|to (change|do|fix))"
    r"|already (been )?(addressed|fixed|handled|resolved|correct|done|in place)"
    r"|(does|do) not need (any )?(changes?|fixing)"
    r"|(doesn't|don't) need (any )?(changes?|fixing))",
    re.IGNORECASE,
)
# A question put to the reader that waits for an answer, not a courtesy offer.
_COURTESY = re.compile(
    r"^[ \t]*(would you like|do you want|shall i|let me know|want me to|should i also|anything else)",
    re.IGNORECASE,
)
# `[ \t]*`, not `\s*`: in a MULTILINE pattern `^\s*` runs over every following blank line from
# every line start, quadratic in a message of blank lines.
_MARKED_QUESTION = re.compile(r"^[ \t]*(?:\*\*)?question(?:\*\*)?[ \t]*:[ \t]*(.+)$", re.IGNORECASE | re.MULTILINE)
_BLOCKING = re.compile(
    r"\b(before I (can|could|change|proceed)|need (your|a) (decision|input|answer)|"
    r"can ?not proceed|can't proceed|unable to proceed|please (confirm|clarify|decide))\b",
    re.IGNORECASE,
)
# Words that, in a sentence naming a finding's file or thread, say it was left undone.
_LEFT_UNDONE = re.compile(
    r"\b(not|skipped|skip|declined?|unable|left|leaving|todo|unchanged|unfixed)\b|n't\b",
    re.IGNORECASE,
)
# A sentence ends at ".", "!" or "?" before a space, or at a line's end (not inside "app.py").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")


def question_in(message: str, changed: bool) -> str | None:
    """The question the message asks the maintainers, or None.

    A line marked `Question:` always counts. Otherwise, when the run changed nothing, the
    message's last line ending in "?" counts unless it is a courtesy offer ("Would you like me
    to..."); when it changed files, only a question said to block the work ("before I can...")
    does, since agents end finished work with offers.
    """
    message = _tail(message)
    marked = _MARKED_QUESTION.findall(message)
    if marked:
        return marked[-1].strip()
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    asked = [line for line in lines if line.rstrip("*_ ").endswith("?") and not _COURTESY.match(line)]
    if not asked:
        return None
    if changed and not _BLOCKING.search(message):
        return None
    return asked[-1]


def says_nothing_needed(message: str) -> bool:
    return bool(_NOTHING_NEEDED.search(_tail(message)))


def singled_out(message: str, finding: Finding) -> bool:
    """Whether a sentence naming the finding's thread or file says it was left undone."""
    names = [n for n in (finding.thread_id, finding.path, os.path.basename(finding.path or "")) if n]
    for sentence in _SENTENCE_END.split(_tail(message)):
        if any(name in sentence for name in names) and _LEFT_UNDONE.search(sentence):
            return True
    return False


def infer_verdict(
    message: str,
    *,
    changed: bool,
    findings: Iterable[Finding] = (),
    changed_files: Iterable[str] | None = None,
) -> dict:
    """A raw verdict object (normalized as any other, bot/fixers/verdict.py) for a run that
    printed none. `changed`: the run left a commit; `changed_files`: what the pushed commit
    changed, None when nothing was pushed (no thread is then answered)."""
    question = question_in(message, changed)
    if question is not None:
        status = NEEDS_INPUT
    elif not changed and says_nothing_needed(message):
        status = CONVERGED
    else:
        status = ADDRESSED
    threads = []
    if status == ADDRESSED and changed and changed_files is not None:
        files = set(changed_files)
        for finding in findings:
            if (finding.thread_id and finding.path in files
                    and not singled_out(message, finding)):
                threads.append({"id": finding.thread_id, "action": "fixed",
                                "reason": "changed in this commit"})
    summary = message or ("changed files; the agent said nothing" if changed else "")
    return {"status": status, "summary": summary, "question": question, "threads": threads}


def inferred(verdict: Verdict) -> Verdict:
    """`verdict` (normalized from `infer_verdict`) with its thread actions marked as the bot's
    guesses: fixing.py replies to them but records none as settled."""
    return replace(verdict, thread_actions=tuple(replace(a, inferred=True) for a in verdict.thread_actions))
