"""The merge stage: dependencies, mergeability, the merge itself."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.prkey import try_parse_pr_key
from storage.statuses import Status

DEPENDS_ON = re.compile(r"^\s*depends[- ]on\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
MERGEABLE_NOW = {"clean", "unstable", "has_hooks"}


def parse_dependencies(body: str | None, own_repo: str) -> list[str]:
    """`Depends-on: owner/repo#N, #M` lines of a PR body, as canonical keys."""
    keys: list[str] = []
    for line in DEPENDS_ON.findall(body or ""):
        for word in re.split(r"[\s,]+", line.strip()):
            if word.startswith("#") and word[1:].isdigit():
                word = f"{own_repo}{word}"
            key = try_parse_pr_key(word)
            if key is not None and str(key) not in keys:
                keys.append(str(key))
    return keys


def find_cycle(start: str, edges: dict[str, list[str]]) -> list[str] | None:
    """A dependency path from `start` back to itself, if there is one."""
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in edges.get(node, []):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


@dataclass(frozen=True)
class MergeView:
    status: str
    head: str | None
    converged_head: str | None
    mergeable_state: str | None
    unmerged_deps: tuple[str, ...]
    cycle: tuple[str, ...] | None
    require_approval: bool
    approved: bool


@dataclass(frozen=True)
class MergeStep:
    kind: str  # wait | new_round | to_merge | merge | update_branch | escalate | back_to_waiting
    reason: str = ""


def decide_merge(v: MergeView) -> MergeStep:
    if v.head and v.converged_head and v.head != v.converged_head and v.status != Status.MERGING:
        return MergeStep("new_round", "a push after convergence")
    if v.status == Status.WAITING_DEPS:
        if v.cycle:
            return MergeStep("escalate", "dependency cycle: " + " → ".join(v.cycle))
        if v.unmerged_deps:
            return MergeStep("wait", "waiting for " + ", ".join(v.unmerged_deps))
        return MergeStep("to_merge", "dependencies merged")
    if v.status == Status.MERGING:
        # A merge whose answer was lost: the PR was re-read and is not merged.
        return MergeStep("back_to_waiting", "merge not confirmed; mergeability re-read")
    if v.require_approval and not v.approved:
        return MergeStep("wait", "waiting for `/converge merge`")
    state = v.mergeable_state or "unknown"
    if state in MERGEABLE_NOW:
        return MergeStep("merge", state)
    if state == "behind":
        return MergeStep("update_branch", "branch is behind its base")
    if state == "dirty":
        return MergeStep("escalate", "the branch has merge conflicts with its base")
    if state == "blocked":
        return MergeStep("wait", "blocked by branch protection (reviews or required checks)")
    return MergeStep("wait", f"mergeability {state}: re-polling")
