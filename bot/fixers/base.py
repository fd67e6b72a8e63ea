"""The fixer contract: what the engine hands a fixer, and the verdict it gets back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args, runtime_checkable

from bot.fixers.usage import Usage
from bot.rules.model import Finding
from storage.keys import PrKey

ADDRESSED = "addressed"
NEEDS_INPUT = "needs_input"
BLOCKED = "blocked"
WAITING = "waiting"
CONVERGED = "converged"
VERDICT_STATUSES = frozenset({ADDRESSED, NEEDS_INPUT, BLOCKED, WAITING, CONVERGED})
QUESTION_STATUSES = frozenset({NEEDS_INPUT, BLOCKED})

ThreadActionKind = Literal["fixed", "declined", "needs_human"]
THREAD_ACTIONS: frozenset[str] = frozenset(get_args(ThreadActionKind))


@dataclass(frozen=True)
class FixRequest:
    pr_key: PrKey  # "owner/repo#N"
    round_no: int
    attempt: int  # 0 for the first run of a round, 1-2 for husk reruns
    title: str
    description: str  # PR body
    head_branch: str
    entry_head: str  # sha captured at round entry: the push lease
    clone_url: str  # file:// (simulator/tests) or https:// (GitHub)
    # repr=False: a request that ends up in a log line or a traceback must not carry the token.
    token: str | None = field(repr=False)
    findings: tuple[Finding, ...]
    instructions: tuple[str, ...]  # maintainer answers / adjudications to apply, attributed text
    pr_author: str | None = None  # login of the PR author, for the `author` fixer's comment
    # What the round asks: "review" (address review findings), "conflict" (bring the base
    # branch in and resolve the conflicts the findings name), "ci" (make the failing checks
    # the findings name pass). See docs/architecture.md, "Merge stage".
    kind: str = "review"
    base_branch: str | None = None  # the PR's base branch (its name in the base repository)
    # The base repository's clone URL where it is not `clone_url`'s (a PR from a fork): a
    # conflict round's `origin/<base>` is fetched from there, not from the fork's namesake.
    base_clone_url: str | None = None
    # `[fixer] prompt_append` for the PR's repository: its own notes, added to the prompt.
    prompt_append: str = ""
    # Asked right before a push: does this run still own the PR, with this attempt still the
    # round's? None: nobody to ask (a fixer run by hand), the push goes ahead.
    still_current: Callable[[], Awaitable[bool]] | None = field(default=None, repr=False, compare=False)
    # Told the sha right before the push, so the push's own webhooks are known as echoes.
    pushing: Callable[[str], None] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class ThreadAction:
    thread_id: str
    action: ThreadActionKind
    reason: str = ""
    # Guessed by the bot (a preset's agent printed no verdict: bot/fixers/agent_wrapper.py), not
    # stated by the agent. Replied to on its round, never recorded as settled: a guess must not
    # answer the same finding raised again later.
    inferred: bool = False


@dataclass(frozen=True)
class Verdict:
    status: str  # addressed | needs_input | blocked | waiting | converged (normalized)
    summary: str = ""
    question: str | None = None
    thread_actions: tuple[ThreadAction, ...] = ()
    finished: bool = True  # False = the fixer never finished (crash, timeout, killed): a "husk"
    pushed_head: str | None = None  # sha the bot pushed, if it pushed
    push_rejected: bool = False  # the lease failed: someone else pushed; nothing overwritten
    withheld: bool = False  # not pushed: the run or the round's attempt moved on while it worked
    comment: str | None = None  # for ask-style fixers: the comment the engine should post
    detail: str | None = None  # short diagnostic (exit code, timeout...), no secrets
    # What the agent spent (a preset CLI's report, and the attempt's wall time); None for a
    # fixer that runs nothing here (mention, author).
    usage: Usage | None = None
    # What the agent's CLI said went wrong (failed edits or tool calls), when it changed nothing.
    failure: str | None = None


def husk(detail: str) -> Verdict:
    """A fixer run that never finished: the engine reruns the round if the head did not move."""
    return Verdict(status=ADDRESSED, finished=False, detail=detail)


@runtime_checkable
class Fixer(Protocol):
    kind: str

    async def run(self, req: FixRequest) -> Verdict: ...
