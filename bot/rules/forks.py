"""Pull requests from forks: whether the fixer may run on one (pure).

A fork's branch holds code from outside the repository's trust, and the bot can push there only
where the fork's author lets maintainers edit it (SECURITY.md, "Pull requests from forks").
"""

from __future__ import annotations

from typing import Any

from bot.rules.findings import fingerprint
from bot.rules.model import Escalate


def head_repo(pr: dict[str, Any]) -> str | None:
    """The full name of the repository the PR's head branch lives in (None: a deleted fork)."""
    return ((pr.get("head") or {}).get("repo") or {}).get("full_name")


def is_fork(pr: dict[str, Any]) -> bool:
    base = ((pr.get("base") or {}).get("repo") or {}).get("full_name") or ""
    head = head_repo(pr)
    return head is None or head.lower() != base.lower()


def fork_refusal(pr: dict[str, Any], allow_forks: bool) -> Escalate | None:
    """None where the fixer may clone, run and push; else the escalation that asks instead.

    Answered, the round runs its fix job again: a branch someone has fixed meanwhile goes on to
    the next round's review, an unchanged one is asked about again (or fixed, once allowed).
    """
    if not is_fork(pr):
        return None
    head, branch = head_repo(pr), (pr.get("head") or {}).get("ref") or "?"
    author = "@" + (((pr.get("user") or {}).get("login")) or "the author")
    where = f"`{head}:{branch}`" if head else f"`{branch}` in a fork that no longer exists"
    if not allow_forks:
        question = (
            f"This PR's branch is {where}, a fork: convergebot does not run its agent on code from "
            "forks (`fixer.allow_forks` is off), so it has not addressed the review's findings.\n\n"
            f"Push a fix to the branch (or ask {author} to), then answer here: the next round "
            "reviews it.")
        cause = "forks off"
    elif head is None or not pr.get("maintainer_can_modify"):
        question = (
            f"This PR's branch is {where}, a fork whose author does not allow maintainers to edit "
            "it, so convergebot cannot push a fix there.\n\n"
            f"Ask {author} to tick *Allow edits by maintainers*, or to push a fix themselves, then "
            "answer here: a fixed branch goes on to the next round's review, an editable one to "
            "the fixer.")
        cause = "cannot push"
    else:
        return None
    return Escalate("fork", question, fingerprint("fork", cause, head))
