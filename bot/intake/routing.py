"""Which work a webhook wakes, decided from the raw JSON alone (pure; no I/O).

A webhook is only a trigger: the jobs it queues re-read the truth from GitHub, so nothing from
the payload beyond "which PR / which ref" is trusted. Typed parsing is never needed here, so a
payload shape githubkit's models reject is still routed.

Every field is read as "this type, or absent": a value of another type, or a string too long
or not storable (`storable`), is read as missing, so a malformed payload is ignored or routed
without that field, never an exception. What goes into a job (its key, its payload) is then
valid on both backends: a repository only as `owner/repo`, a PR number and a comment id only
as an id GitHub could have made.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from bot.github.stamps import github_id
from bot.rules.commands import looks_like_command
from bot.rules.model import CHECK_RUN_NAME, COALESCING
from storage.keys import MAX_NUMBER, PrKey, try_parse_pr_key
from storage.statuses import JobKind

_SURROGATE = re.compile("[\ud800-\udfff]")
# A merge group's branch names its PR: gh-readonly-queue/<base>/pr-<number>-<head sha>.
_QUEUE_REF = re.compile(r"^(?:refs/heads/)?gh-readonly-queue/.+/pr-(\d{1,19})-[0-9a-f]{40,64}$")

# The events a GitHub App (or a repository webhook) subscribes to: each wakes work below. The App
# manifest's `default_events` must equal this set (tests/unit/test_github_app_manifest.py).
SUBSCRIBED_EVENTS = frozenset({
    "pull_request", "pull_request_review", "pull_request_review_comment",
    "pull_request_review_thread", "issue_comment", "check_suite", "check_run", "status", "push",
    "merge_group",
})
# Sent to every App or hook whatever it subscribes to; accepted, and nothing to do.
UNSUBSCRIBED_EVENTS = frozenset({"ping", "installation", "installation_repositories", "installation_target"})
KNOWN_EVENTS = SUBSCRIBED_EVENTS | UNSUBSCRIBED_EVENTS


# A PR's webhooks come in bursts (a review, then each of its comments; a push, then its checks):
# its sync waits this long so the burst coalesces into the one queued sync (`COALESCING`).
SYNC_DEBOUNCE_SECONDS = 0.2


@dataclass(frozen=True)
class Wake:
    """A job to queue: `sync` one PR, or `sync_ref` the enrolled PRs at a sha or branch."""

    kind: str
    key: str
    pr_key: PrKey | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    delay_seconds: float = 0.0

    def job(self) -> dict[str, Any]:
        """`jobs.enqueue_in`'s keyword arguments for it (`dataclasses.asdict` would deep-copy)."""
        return {"kind": self.kind, "key": self.key, "pr_key": self.pr_key, "payload": self.payload,
                "delay_seconds": self.delay_seconds, "same_as": COALESCING.get(self.kind)}


@dataclass(frozen=True)
class EnrollRules:
    label: str = "converge"
    authors: frozenset[str] = frozenset()
    bot_login: str = ""  # whose events only echo our own writes (empty: none are)
    own_pushes: Container[tuple[str, str]] = frozenset()  # (repo lowercased, sha) we pushed
    # A check naming more PRs than this wakes one `sync_ref` of its head sha instead of a sync
    # per PR: one delivery never queues thousands of jobs in one transaction.
    max_prs: int = 100


# Every field of a payload anything reads: the routing here, `learn_from_payload`
# (bot/github/installations.py), `repoconfig.touched` and the handler's `action`. A name maps to
# None (its value is read whole, of any type), to the names read under it (an object), or to a
# one-item list of those (a list of objects). /webhook parses these and skips the rest of the
# body (`bot/intake/webhook.py` `parse_read`); tests/unit/test_webhook_parse.py records each field
# the readers touch, on every example and on hostile payloads, and fails on one missing here.
_CHECK = {"name": None, "head_sha": None, "app": {"slug": None}, "pull_requests": [{"number": None}]}
PAYLOAD_READ: dict[str, Any] = {
    "action": None, "after": None, "ref": None, "sha": None,
    "repository": {"full_name": None, "default_branch": None},
    "installation": {"id": None},
    "sender": {"login": None},
    "label": {"name": None},
    "pull_request": {"number": None, "user": {"login": None}, "head": {"sha": None}},
    "comment": {"id": None, "body": None, "created_at": None, "updated_at": None,
                "user": {"login": None, "type": None}},
    "issue": {"number": None, "pull_request": None},
    "check_run": _CHECK, "check_suite": _CHECK,
    "merge_group": {"head_ref": None},
    "commits": [{"added": None, "modified": None, "removed": None}],
}


# --- reading the payload: each field of its type, or None ------------------------------------


def storable(text: str, limit: int) -> bool:
    """At most `limit` characters, and storable on both backends: PostgreSQL refuses a NUL in
    text, and neither UTF-8 encoder takes a lone surrogate (JSON's `\\ud800` decodes to one)."""
    return len(text) <= limit and "\x00" not in text and (text.isascii() or not _SURROGATE.search(text))


def _obj(parent: object, name: str) -> dict:
    value = parent.get(name) if isinstance(parent, dict) else None
    return value if isinstance(value, dict) else {}


def _text(parent: object, name: str, limit: int = 255) -> str | None:
    value = parent.get(name) if isinstance(parent, dict) else None
    return value if isinstance(value, str) and storable(value, limit) else None


def _id(parent: object, name: str) -> int | None:
    """A GitHub id or number (`github_id`) under `name`, or None."""
    return github_id(parent.get(name) if isinstance(parent, dict) else None)


def _login(user: object) -> str:
    return (_text(user, "login") or "").lower()


def _repo(payload: dict) -> str | None:
    """`repository.full_name` lowercased, if it is `owner/repo`: it goes into job keys."""
    name = _text(_obj(payload, "repository"), "full_name")
    return _repo_name(name) if name else None


@functools.lru_cache(maxsize=1024)  # the same few repositories, delivery after delivery
def _repo_name(name: str) -> str | None:
    key = try_parse_pr_key(f"{name}#1")
    return key.full_repo if key else None


def _pr_key(repo: str | None, number: int | None) -> PrKey | None:
    """The key of PR `number` of `repo`, which `_repo` read (a valid `owner/repo`, lowercased):
    the key `try_parse_pr_key` would make of them, without parsing it again."""
    if not repo or not number or number > MAX_NUMBER:
        return None
    owner, _, name = repo.partition("/")
    return PrKey(owner, name, number)


# --- the wakes ---------------------------------------------------------------------------------


# A command comment up to this long is kept in its job; a longer one is read again by the job.
COMMAND_TEXT_KEPT = 4000


def command_wake(key: PrKey | None, comment: object, kind: str) -> Wake | None:
    """The `command` job a PR comment (`kind`: issue or review) wakes, or None. Its key is the
    comment id, so a webhook, its redelivery and the repository scan all queue the one job."""
    comment_id = _id(comment, "id")
    if key is None or comment_id is None or not isinstance(comment, dict):  # an id: a dict
        return None
    user, body = _obj(comment, "user"), comment.get("body")
    if user.get("type") == "Bot" or not looks_like_command(body):
        return None
    payload: dict[str, Any] = {"comment_id": comment_id, "kind": kind}
    if len(body) <= COMMAND_TEXT_KEPT:
        # The comment as GitHub sent it (a signed delivery, or the scan's read) rides along: the
        # job acts on it without reading it again, and a comment is a command as it was created.
        payload["comment"] = {"body": body, "user": {"login": _text(user, "login"), "type": user.get("type")},
                              "created_at": comment.get("created_at"), "updated_at": comment.get("updated_at")}
    return Wake(JobKind.COMMAND, f"cmd:{comment_id}", key, payload)


def _command(key: PrKey | None, comment: object, kind: str) -> tuple[Wake, ...]:
    wake = command_wake(key, comment, kind)
    return () if wake is None else (wake,)


def _enroll(delivery_id: str, key: PrKey | None, payload: dict, action: str | None,
            rules: EnrollRules) -> tuple[Wake, ...]:
    label = _text(_obj(payload, "label"), "name")
    author = _login(_obj(payload, "pull_request").get("user"))
    wanted = (action == "labeled" and label == rules.label) or (
        action in ("opened", "reopened", "ready_for_review") and author in rules.authors)
    if key is None or not wanted:
        return ()
    return (Wake(JobKind.ENROLL, f"enroll:{key}:{delivery_id}", key),)


@dataclass(frozen=True)
class Routed:
    outcome: str  # queued | ignored
    reason: str
    wakes: tuple[Wake, ...] = ()


def _sync(delivery_id: str, *keys: PrKey | None) -> tuple[Wake, ...]:
    unique = sorted({k for k in keys if k is not None})
    return tuple(Wake(JobKind.SYNC, f"sync:{key}:{delivery_id}", key, delay_seconds=SYNC_DEBOUNCE_SECONDS)
                 for key in unique)


def _pushed_head(event: str, payload: dict, action: str | None) -> str | None:
    """The sha a `push` or a `pull_request` `synchronize` moved the branch to."""
    if event == "push":
        return _text(payload, "after", 64)
    if event == "pull_request" and action == "synchronize":
        return _text(_obj(_obj(payload, "pull_request"), "head"), "sha", 64)
    return None


def echo(event: str, payload: dict, repo: str | None, action: str | None, rules: EnrollRules) -> str | None:
    """Why this event only echoes a write of ours and wakes nothing, or None.

    Our replies, resolves, reviews-by-reply, review requests and check runs each come back as a
    webhook; the write's own decision already queued what follows it, so re-reading the PR for
    them costs requests and learns nothing. So does the push of a head our fixer run pushed (its
    progress check reads the branch). Any other push is news for the round whoever made it, and
    a merge ends the run.
    """
    sha = _pushed_head(event, payload, action)
    if sha is not None and repo and (repo, sha) in rules.own_pushes:
        return f"{event}: our fixer's push of {sha[:7]}"
    bot = rules.bot_login.lower()
    if event in ("check_run", "check_suite"):
        obj = _obj(payload, event)
        ours = bool(bot) and (_text(_obj(obj, "app"), "slug") or "").lower() == bot.removesuffix("[bot]")
        if ours or (event == "check_run" and obj.get("name") == CHECK_RUN_NAME):
            return f"{event}: our own check run"
        return None
    if not bot or _login(payload.get("sender")) != bot:
        return None
    if event in ("pull_request_review_comment", "pull_request_review_thread", "pull_request_review"):
        return f"{event} {action}: our own reply or resolve"
    if event == "pull_request" and action in ("review_requested", "review_request_removed", "labeled", "unlabeled",
                                              "enqueued"):
        return f"pull_request {action}: our own request"
    if event == "issue_comment":
        # Ours as a plain user (a token): an escalation or a reply that quotes a command is no
        # command (the command's handler refuses our login too; this spares the job).
        return f"issue_comment {action}: our own comment"
    return None


def _sync_ref(delivery_id: str, repo: str | None, *, sha: str | None = None,
              branch: str | None = None) -> tuple[Wake, ...]:
    if not repo or not (sha or branch):
        return ()
    # Debounced like a PR's sync: a CI's statuses for one sha coalesce into the one queued.
    return (Wake(JobKind.SYNC_REF, f"sync_ref:{repo}:{delivery_id}", None, {"repo": repo, "sha": sha, "branch": branch},
                 delay_seconds=SYNC_DEBOUNCE_SECONDS),)


def _check(event: str, payload: dict, delivery_id: str, repo: str | None, rules: EnrollRules) -> tuple[Wake, ...]:
    """A check run or suite wakes the PRs it names, or, naming none or more than `max_prs`,
    the enrolled PRs at its head sha."""
    obj = _obj(payload, event)
    prs = obj.get("pull_requests")
    prs = prs if isinstance(prs, list) and len(prs) <= rules.max_prs else []
    wakes = _sync(delivery_id, *(_pr_key(repo, _id(p, "number")) for p in prs))
    return wakes or _sync_ref(delivery_id, repo, sha=_text(obj, "head_sha", 64))


def queued_pr(head_ref: str | None) -> int | None:
    """The PR number a merge group's branch names, or None."""
    found = _QUEUE_REF.match(head_ref or "")
    return github_id(int(found.group(1))) if found else None


def route(event: str, payload: dict, delivery_id: str, rules: EnrollRules = EnrollRules()) -> Routed:
    if event not in KNOWN_EVENTS:
        return Routed("ignored", f"unhandled event {event!r}")
    if event in UNSUBSCRIBED_EVENTS:
        return Routed("ignored", f"{event}: nothing to do")
    repo, action = _repo(payload), _text(payload, "action")
    if (why := echo(event, payload, repo, action, rules)) is not None:
        return Routed("ignored", why)

    if event.startswith("pull_request"):
        key = _pr_key(repo, _id(_obj(payload, "pull_request"), "number"))
        wakes = _sync(delivery_id, key)
        if event == "pull_request":
            wakes += _enroll(delivery_id, key, payload, action, rules)
        if event == "pull_request_review_comment" and action == "created":
            wakes += _command(key, payload.get("comment"), "review")
    elif event == "issue_comment":
        issue = _obj(payload, "issue")
        if not issue.get("pull_request"):
            return Routed("ignored", "comment on an issue, not a pull request")
        if action != "created":
            return Routed("ignored", f"issue_comment {action}: only new comments are commands")
        wakes = _command(_pr_key(repo, _id(issue, "number")), payload.get("comment"), "issue")
        if not wakes:
            return Routed("ignored", "comment is not a command")
    elif event in ("check_suite", "check_run"):
        wakes = _check(event, payload, delivery_id, repo, rules)
    elif event == "status":
        wakes = _sync_ref(delivery_id, repo, sha=_text(payload, "sha", 64))
    elif event == "merge_group":
        # Its group built, merged or destroyed: the PR it holds reads its queue entry again.
        wakes = _sync(delivery_id, _pr_key(repo, queued_pr(_text(_obj(payload, "merge_group"), "head_ref", 1024))))
    else:  # push
        ref = _text(payload, "ref")
        branch = ref.removeprefix("refs/heads/") if ref and ref.startswith("refs/heads/") else None
        wakes = _sync_ref(delivery_id, repo, branch=branch) if branch else ()

    if not wakes:
        return Routed("ignored", f"{event}: no pull request or ref in the payload")
    return Routed("queued", f"{event}: {len(wakes)} job(s)", wakes)
