"""The merge stage: dependencies, mergeability, the merge itself."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bot.rules.findings import fingerprint
from bot.rules.model import CHECK_RUN_NAME, FAILED_CONCLUSIONS, Finding
from bot.rules.words import code, took
from storage.keys import PrKey, PrKeyError, parse_pr_key
from storage.statuses import RoundKind, Status

DEPENDS_ON = re.compile(r"^\s*depends[- ]on\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)
MERGEABLE_NOW = {"clean", "unstable", "has_hooks"}
# How a wait of the merge stage begins its `last_action`, where what follows names what it waits
# on: `bot/rules/waiting.py` reads them back.
CHECKS_RUNNING = "blocked: required checks still running: "
CHECKS_UNREPORTED = "blocked by branch protection: required checks have not reported: "
AWAITING_APPROVAL = "waiting for `/converge merge`"
APPROVAL_WANTED = "blocked by branch protection: waiting for an approving review from "
ANYONE_WHO_WRITES = "someone with write access"


class DependencyError(ValueError):
    """A dependency given with an enrollment that is no PR key, or the PR itself."""


def dependency_key(word: str, own_repo: str) -> PrKey:
    """A dependency as written: `owner/repo#N` (or the PR's URL), or `#N` in `own_repo`;
    PrKeyError otherwise."""
    text = word.strip()
    if text.startswith("#") and text[1:].isascii() and text[1:].isdigit():
        text = f"{own_repo}{text}"
    return parse_pr_key(text)


def parse_dependencies(body: str | None, own_repo: str) -> list[PrKey]:
    """`Depends-on: owner/repo#N, #M` lines of a PR body, as canonical keys (a word that is no
    key is skipped: the body is prose)."""
    keys: list[PrKey] = []
    for line in DEPENDS_ON.findall(body or ""):
        for word in re.split(r"[\s,]+", line.strip()):
            try:
                key = dependency_key(word, own_repo)
            except PrKeyError:
                continue
            if key not in keys:
                keys.append(key)
    return keys


def explicit_dependencies(pr_key: PrKey, words: Iterable[str]) -> tuple[PrKey, ...]:
    """The dependencies given with an enrollment (`--depends-on`, the API's `depends_on`), each
    once, in the order given. Unlike a body's line, a word that is no key is refused, as is the
    PR itself: DependencyError names the first such word."""
    keys: list[PrKey] = []
    for word in words:
        try:
            key = dependency_key(word, pr_key.full_repo)
        except PrKeyError:
            raise DependencyError(f"malformed dependency {word!r}: expected owner/repo#N or #N") from None
        if key == pr_key:
            raise DependencyError(f"{pr_key} cannot depend on itself")
        if key not in keys:
            keys.append(key)
    return tuple(keys)


def find_cycle(start: PrKey, edges: Mapping[PrKey, list[PrKey]]) -> list[PrKey] | None:
    """A dependency path from `start` back to itself, if there is one."""
    stack = [(start, [start])]
    seen: set[PrKey] = set()
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
class FailedCheck:
    """A check (run or commit status) that failed on the head, as the fixer is shown it."""

    name: str
    conclusion: str
    title: str | None = None
    summary: str | None = None
    url: str | None = None
    run_id: int | None = None  # a check run's (a commit status has none)
    annotation_count: int = 0
    annotations: tuple[str, ...] = ()  # "path:line: message", the first few


@dataclass(frozen=True)
class ReviewsWanted:
    """What a PR GitHub holds `blocked` for want of an approving review waits on: the reviewers
    requested on it (logins, and teams as `@org/slug`), and what branch protection requires,
    where GitHub shows it: how many approvals, and whether a code owner's among them."""

    requested: tuple[str, ...] = ()
    approvals: int | None = None
    code_owners: bool = False

    @property
    def text(self) -> str:
        """Whom, as `last_action` ends and the surfaces show it (after `APPROVAL_WANTED`)."""
        whom = ", ".join(self.requested) or ANYONE_WHO_WRITES
        if self.approvals and self.code_owners:
            return f"{whom} ({self.approvals} required, a code owner's among them)"
        if self.approvals:
            return f"{whom} ({self.approvals} required)"
        return f"{whom} (a code owner's required)" if self.code_owners else whom


def reviews_wanted(gh_pr: Mapping[str, Any], rule: Mapping[str, Any] | None, org: str) -> ReviewsWanted:
    """From the PR as read (`requested_reviewers`, `requested_teams`: teams of `org`, its
    repository's owner) and its base branch's rule (`requiredApprovingReviewCount`,
    `requiresCodeOwnerReviews`; None: GitHub shows the app none)."""
    users = [u["login"] for u in gh_pr.get("requested_reviewers") or () if u and u.get("login")]
    teams = [f"@{org}/{t['slug']}" for t in gh_pr.get("requested_teams") or () if t and t.get("slug")]
    rule = rule or {}
    count = rule.get("requiredApprovingReviewCount")
    return ReviewsWanted(tuple(users + teams), count if isinstance(count, int) and count > 0 else None,
                         rule.get("requiresCodeOwnerReviews") is True)


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
    # Read only when the state calls for them (merging.py): the checks that block the merge,
    # those still running, the files changed on both sides, and the fix rounds already spent.
    failing_checks: tuple[FailedCheck, ...] = ()
    pending_checks: tuple[str, ...] = ()
    conflict_files: tuple[str, ...] = ()
    conflict_rounds: int = 0
    ci_rounds: int = 0
    conflict_attempts: int = 2
    ci_fix_attempts: int = 2
    unknown_for: timedelta = timedelta(0)  # how long GitHub has said "unknown"
    unknown_timeout: timedelta = timedelta(minutes=10)
    merge_tries: int = 0  # merges (or enqueues) already queued by the run, none of which merged
    merge_attempts: int = 5
    last_action: str | None = None  # what the row says of the last try
    # Required checks with no run or status on the head at all, and the clock of the wait for
    # them: `checks_since` is when the wait on this head began (`checks_wait_began`).
    unreported_checks: tuple[str, ...] = ()
    now: datetime | None = None
    checks_since: datetime | None = None
    checks_timeout: timedelta = timedelta(hours=1)
    # Read only for a `blocked` PR no check holds back, and set where GitHub's review decision
    # says it wants an approving review (`REVIEW_REQUIRED`).
    reviews_wanted: ReviewsWanted | None = None
    # The PRs this one is stacked on that have landed while it still is to be re-based off them
    # (docs/stacks.md): retargeted to their base and its own commits replayed onto it.
    restack: tuple[PrKey, ...] = ()


@dataclass(frozen=True)
class MergeStep:
    # wait | wait_unknown | new_round | to_merge | merge | update_branch | escalate |
    # back_to_waiting | fix_round | restack
    kind: str
    reason: str = ""
    round_kind: str | None = None  # fix_round: conflict | ci
    escalation: str = "merge"  # escalate: the escalation's kind


def _files(files: tuple[str, ...]) -> str:
    return ", ".join(code(f) for f in files) if files else "(GitHub does not say which files)"


def ci_step(failing: tuple[FailedCheck, ...], rounds_used: int, attempts: int, where: str = "") -> MergeStep:
    """Failing checks: a CI round while the budget lasts, then one escalation naming them."""
    names = ", ".join(code(c.name) for c in failing)
    if rounds_used < attempts:
        return MergeStep("fix_round", f"failing checks{where}: {names}", "ci")
    return MergeStep("escalate", f"the checks {names} still fail{where} after {rounds_used} CI-fix round(s)",
                     escalation="ci")


def checks_wait_began(waiting_since: datetime | None, answered_since: datetime | None) -> datetime | None:
    """When the wait for the head's required checks began: the round's wait on that head (a push
    starts a new one), or a maintainer's answer since, so an answered timeout counts afresh."""
    return max((t for t in (waiting_since, answered_since) if t is not None), default=None)


def unreported(runs_: list[dict[str, Any]], status: dict[str, Any], required: Collection[str]) -> tuple[str, ...]:
    """The `required` checks with neither a check run nor a commit status on the head."""
    seen = {r.get("name") for r in runs_ or ()} | {st.get("context") for st in (status or {}).get("statuses") or ()}
    return tuple(sorted(set(required) - seen))


def checks_overdue(v: MergeView) -> MergeStep | None:
    """Required checks with no result past `checks_timeout`: one escalation naming them."""
    silent = sorted({*v.pending_checks, *v.unreported_checks})
    if not silent or v.now is None or v.checks_since is None or v.now - v.checks_since < v.checks_timeout:
        return None
    return MergeStep("escalate", f"the required checks {', '.join(code(n) for n in silent)} have not reported "
                                 f"within {took(v.checks_timeout)}", escalation="checks_missing")


RESTACKING = "re-basing onto its parent's base: "


def decide_merge(v: MergeView) -> MergeStep:
    if v.head and v.converged_head and v.head != v.converged_head and v.status != Status.MERGING:
        return MergeStep("new_round", "a push after convergence")
    if v.status == Status.WAITING_DEPS:
        if v.cycle:
            return MergeStep("escalate", "dependency cycle: " + " → ".join(v.cycle))
        if v.unmerged_deps:
            return MergeStep("wait", "waiting for " + ", ".join(v.unmerged_deps))
        if v.restack:
            return MergeStep("restack", RESTACKING + ", ".join(v.restack) + " landed")
        return MergeStep("to_merge", "dependencies merged")
    if v.status == Status.MERGING:
        # A merge whose answer was lost: the PR was re-read and is not merged.
        return MergeStep("back_to_waiting", "merge not confirmed; mergeability re-read")
    if v.require_approval and not v.approved:
        return MergeStep("wait", AWAITING_APPROVAL)
    state = v.mergeable_state or "unknown"
    if v.failing_checks and state in ("blocked", "unstable"):
        return ci_step(v.failing_checks, v.ci_rounds, v.ci_fix_attempts)
    if state in MERGEABLE_NOW:
        if v.merge_tries >= v.merge_attempts:
            # Refused each time (by GitHub, or out of the merge queue with nothing to fix):
            # another try would only fail the same way.
            return MergeStep("escalate", f"{v.merge_tries} merge tries did not merge it; the last: "
                                         f"{v.last_action or 'no reason given'}")
        return MergeStep("merge", state)
    if state == "behind":
        return MergeStep("update_branch", "branch is behind its base")
    if state == "dirty":
        if v.conflict_rounds < v.conflict_attempts:
            return MergeStep("fix_round", f"conflicts with the base in {_files(v.conflict_files)}", "conflict")
        return MergeStep("escalate", f"the branch still conflicts with its base after {v.conflict_rounds} "
                                     f"conflict round(s); files changed on both sides: {_files(v.conflict_files)}",
                         escalation="conflict")
    if state == "blocked":
        if (overdue := checks_overdue(v)) is not None:
            return overdue
        if v.pending_checks:
            return MergeStep("wait", CHECKS_RUNNING + ", ".join(v.pending_checks))
        if v.unreported_checks:
            return MergeStep("wait", CHECKS_UNREPORTED + ", ".join(v.unreported_checks))
        if v.reviews_wanted is not None:
            return MergeStep("wait", APPROVAL_WANTED + v.reviews_wanted.text)
        return MergeStep("wait", "blocked by branch protection: waiting for required reviews "
                                 "(or required checks that have not reported)")
    if state == "draft":
        return MergeStep("wait", "the PR is a draft")
    if v.unknown_for >= v.unknown_timeout:
        return MergeStep("escalate", f"mergeability stalled: GitHub has not said whether the PR can be merged "
                                     f"for {int(v.unknown_for.total_seconds() // 60)} minutes",
                         escalation="mergeability")
    return MergeStep("wait_unknown", f"mergeability {state}: re-polling")


CHECK_SUMMARY_CHARS = 2000  # of a failed check's output summary, handed to the fixer


def failed_checks(runs_: list[dict[str, Any]], status: dict[str, Any],
                  required: list[str]) -> tuple[tuple[FailedCheck, ...], tuple[str, ...]]:
    """The failed and the still-running checks of the head (ours left out): those `required`
    names when it names any, else all of them (GitHub said the PR is blocked; a failing check is
    what a fixer can act on)."""
    failing: dict[str, FailedCheck] = {}
    pending: set[str] = set()
    for run in runs_ or ():
        name = run.get("name")
        if not isinstance(name, str) or name == CHECK_RUN_NAME:
            continue
        if run.get("status") != "completed":
            pending.add(name)
        elif run.get("conclusion") in FAILED_CONCLUSIONS:
            output = run.get("output") or {}
            count = output.get("annotations_count")
            failing[name] = FailedCheck(name, run["conclusion"], output.get("title"), output.get("summary"),
                                        run.get("details_url") or run.get("html_url"), run.get("id"),
                                        count if isinstance(count, int) else 0)
    for st in (status or {}).get("statuses") or ():
        name, state = st.get("context"), st.get("state")
        if not isinstance(name, str):
            continue
        if state == "pending":
            pending.add(name)
        elif state in ("failure", "error"):
            failing[name] = FailedCheck(name, state, None, st.get("description"), st.get("target_url"))
    if required:
        failing = {n: c for n, c in failing.items() if n in required}
        pending &= set(required)
    return tuple(failing[n] for n in sorted(failing)), tuple(sorted(pending - set(failing)))


def fix_findings(step: MergeStep, view: MergeView, base: str) -> tuple[Finding, ...]:
    """What a conflict or CI round hands the fixer, one finding per file or check."""
    head = (view.head or "")[:7]
    if step.round_kind == RoundKind.CONFLICT:
        ask = f"Merge {code('origin/' + base)} into the branch and resolve the conflicts."
        if not view.conflict_files:
            return (Finding(None, None, None, None, f"GitHub reports that this branch conflicts with {code(base)}. {ask}",
                            None, fingerprint("conflict", base)),)
        return tuple(Finding(None, None, path, None,
                             f"{code(path)} was changed both on this branch and on {code(base)} since they parted, and "
                             f"GitHub reports conflicts. {ask}", None, fingerprint("conflict", path))
                     for path in view.conflict_files)
    out = []
    for c in view.failing_checks:
        parts = [f"The check {code(c.name)} failed on {head} (conclusion: {c.conclusion}). Make it pass."]
        if c.title:
            parts.append(f"**{c.title[:300]}**")
        if c.summary:
            parts.append(c.summary[:CHECK_SUMMARY_CHARS])
        if c.annotations:
            parts.append("Annotations:\n" + "\n".join(f"- {a[:500]}" for a in c.annotations))
        if c.url:
            parts.append(f"Details: {c.url}")
        out.append(Finding(None, None, None, None, "\n\n".join(parts), None, fingerprint("check", c.name)))
    return tuple(out)
