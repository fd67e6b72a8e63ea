"""Writes an API client made more than once where once was meant: what a chaos test asserts away.

Read from the side effects (API clients' writes only), grouped by what makes a write "the same":

- `issue_comment`: one hidden `<!-- convergebot:... -->` marker posted twice on one PR by one actor;
- `review_reply`: one marker posted twice in one review thread by one actor;
- `check_run_created`: two runs of one name on one head sha by one app (actor);
- `merge`: one PR merged twice;
- `enqueue`: one merge-queue entry asked for twice (a PR queued again after it left the queue
  is a new entry).

Reactions are not checked: GitHub answers a repeated reaction 200 with the existing one, and
only created reactions are recorded, so they cannot repeat.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from .state import State

MARKER = re.compile(r"<!--\s*(convergebot:[^\s>]*)\s*-->")


def _markers(body: str | None) -> set[str]:
    return set(MARKER.findall(body or ""))


def _thread_of(state: State, effect: dict) -> str | None:
    """The node id of the thread a reply went to (review comments are never deleted)."""
    comments = state.review_comments
    comment = comments.get(effect["id"]) if "id" in effect else None
    if comment is None and "in_reply_to" in effect:
        comment = comments.get(effect["in_reply_to"])
    thread = state.threads.get(comment.thread_id) if comment is not None else None
    return thread.node_id if thread is not None else None


def _keys(state: State, effect: dict) -> list[tuple]:
    """The identities of one effect; two effects sharing one are duplicates."""
    kind, repo, actor = effect["kind"], effect.get("repo"), effect["actor"]
    if kind == "issue_comment":
        return [(kind, repo, effect["number"], actor, m) for m in _markers(effect.get("body"))]
    if kind == "review_reply":
        thread = _thread_of(state, effect)
        return [(kind, repo, effect["number"], thread, actor, m)
                for m in _markers(effect.get("body"))]
    if kind == "check_run_created":
        return [(kind, repo, effect["head_sha"], effect["name"], actor)]
    if kind == "merge":
        return [(kind, repo, effect["number"])]
    if kind == "enqueue":
        return [(kind, repo, effect["number"], effect["entry"])]
    return []


_FIELDS = {
    "issue_comment": ("repo", "number", "actor", "marker"),
    "review_reply": ("repo", "number", "thread", "actor", "marker"),
    "check_run_created": ("repo", "head_sha", "name", "actor"),
    "merge": ("repo", "number"),
    "enqueue": ("repo", "number", "entry"),
}


def duplicate_effects(effects: list[dict], state: State) -> list[dict[str, Any]]:
    """Each group of the same intended-once write that happened more than once, in the order
    first seen: `{kind, <its key fields>, count, ids}` (ids: comment, run or merge-commit ids)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for effect in effects:
        for key in _keys(state, effect):
            groups[key].append(effect)
    found = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        kind = key[0]
        group: dict[str, Any] = {"kind": kind, **dict(zip(_FIELDS[kind], key[1:], strict=True))}
        group["count"] = len(members)
        group["ids"] = [m.get("id", m.get("sha")) for m in members]
        found.append(group)
    return found
