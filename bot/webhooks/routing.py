"""Which work a webhook wakes, decided from the raw JSON alone (pure; no I/O).

A webhook is only a trigger: the jobs it queues re-read the truth from GitHub, so nothing from
the payload beyond "which PR / which ref" is trusted. Typed parsing is never needed here, so a
payload shape githubkit's models reject is still routed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from bot.prkey import PrKey, try_parse_pr_key

KNOWN_EVENTS = frozenset({
    "ping", "pull_request", "pull_request_review", "pull_request_review_comment",
    "pull_request_review_thread", "issue_comment", "check_suite", "check_run", "status", "push",
    "installation", "installation_repositories", "installation_target",
})


# A PR's webhooks come in bursts (a review, then each of its comments; a push, then its checks):
# its sync waits this long so the burst coalesces into the one queued sync (storage/jobs.py).
SYNC_DEBOUNCE_SECONDS = 0.2
CHECK_RUN_NAME = "convergebot"


@dataclass(frozen=True)
class Wake:
    """A job to queue: `sync` one PR, or `sync_ref` the enrolled PRs at a sha or branch."""

    kind: str
    key: str
    pr_key: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    delay_seconds: float = 0.0

    def job(self) -> dict[str, Any]:
        """`jobs.enqueue_in`'s keyword arguments for it (`dataclasses.asdict` would deep-copy)."""
        return {"kind": self.kind, "key": self.key, "pr_key": self.pr_key, "payload": self.payload,
                "delay_seconds": self.delay_seconds}


class OwnPushes:
    """The heads our fixer runs pushed, per repository, newest last (a bounded memory).

    The fixer's workspace tells this the sha right before its push, so the push's own webhooks
    (`push`, `pull_request` `synchronize`), which may arrive before the push command returns, are
    known as echoes: the fix job's progress check reads the branch anyway. Kept in memory: after
    a restart those webhooks wake a sync again, which costs reads and loses nothing.
    """

    def __init__(self, size: int = 4096) -> None:
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._size = size

    def add(self, repo: str, sha: str) -> None:
        self._seen[(repo.lower(), sha)] = None
        self._seen.move_to_end((repo.lower(), sha))
        while len(self._seen) > self._size:
            self._seen.popitem(last=False)

    def __contains__(self, item: object) -> bool:
        return item in self._seen


def own_pushes(rt: Any) -> OwnPushes:
    """The process's memory of its fixer pushes (in `Runtime.extras`)."""
    return rt.extras.setdefault("own_pushes", OwnPushes())


@dataclass(frozen=True)
class EnrollRules:
    label: str = "converge"
    authors: frozenset[str] = frozenset()
    bot_login: str = ""  # whose events only echo our own writes (empty: none are)
    own_pushes: Container[tuple[str, str]] = frozenset()  # (repo lowercased, sha) we pushed


def looks_like_command(body: object) -> bool:
    """Worth a `command` job: the job re-reads the comment and parses it for real."""
    return isinstance(body, str) and ("/converge" in body or "convergebot escalation #" in body)


def command_wake(key: PrKey | None, comment: object, kind: str) -> Wake | None:
    """The `command` job a PR comment (`kind`: issue or review) wakes, or None. Its key is the
    comment id, so a webhook, its redelivery and the repository scan all queue the one job."""
    if key is None or not isinstance(comment, dict) or not isinstance(comment.get("id"), int):
        return None
    if (comment.get("user") or {}).get("type") == "Bot" or not looks_like_command(comment.get("body")):
        return None
    return Wake("command", f"cmd:{comment['id']}", str(key), {"comment_id": comment["id"], "kind": kind})


def _command(delivery_id: str, key: PrKey | None, comment: object, kind: str) -> tuple[Wake, ...]:
    wake = command_wake(key, comment, kind)
    return () if wake is None else (wake,)


def _enroll(delivery_id: str, key: PrKey | None, payload: dict, rules: EnrollRules) -> tuple[Wake, ...]:
    pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else {}
    action = payload.get("action")
    label = (payload.get("label") or {}).get("name") if isinstance(payload.get("label"), dict) else None
    author = ((pr.get("user") or {}).get("login") or "").lower()
    wanted = (action == "labeled" and label == rules.label) or (
        action in ("opened", "reopened", "ready_for_review") and author in rules.authors)
    if key is None or not wanted:
        return ()
    return (Wake("enroll", f"enroll:{key}:{delivery_id}", str(key)),)


@dataclass(frozen=True)
class Routed:
    outcome: str  # queued | ignored
    reason: str
    wakes: tuple[Wake, ...] = ()


def _repo(payload: dict) -> str | None:
    repo = payload.get("repository")
    return repo.get("full_name") if isinstance(repo, dict) else None


def _pr_key(repo: str | None, number: Any) -> PrKey | None:
    if not repo or not isinstance(number, int) or isinstance(number, bool):
        return None
    return try_parse_pr_key(f"{repo}#{number}")


def _sync(delivery_id: str, *keys: PrKey | None) -> tuple[Wake, ...]:
    unique = sorted({k for k in keys if k is not None})
    return tuple(Wake("sync", f"sync:{k}:{delivery_id}", str(k), delay_seconds=SYNC_DEBOUNCE_SECONDS)
                 for k in unique)


def _login(user: object) -> str:
    return ((user.get("login") if isinstance(user, dict) else None) or "").lower()


def _pushed_head(event: str, payload: dict) -> str | None:
    """The sha a `push` or a `pull_request` `synchronize` moved the branch to."""
    if event == "push":
        sha = payload.get("after")
    elif event == "pull_request" and payload.get("action") == "synchronize":
        pr = payload.get("pull_request") if isinstance(payload.get("pull_request"), dict) else {}
        sha = (pr.get("head") or {}).get("sha") if isinstance(pr.get("head"), dict) else None
    else:
        return None
    return sha if isinstance(sha, str) else None


def echo(event: str, payload: dict, rules: EnrollRules) -> str | None:
    """Why this event only echoes a write of ours and wakes nothing, or None.

    Our replies, resolves, reviews-by-reply, review requests and check runs each come back as a
    webhook; the write's own decision already queued what follows it, so re-reading the PR for
    them costs requests and learns nothing. So does the push of a head our fixer run pushed (its
    progress check reads the branch). Any other push is news for the round whoever made it, and
    a merge ends the run.
    """
    sha, repo = _pushed_head(event, payload), _repo(payload)
    if sha is not None and repo and (repo.lower(), sha) in rules.own_pushes:
        return f"{event}: our fixer's push of {sha[:7]}"
    bot = rules.bot_login.lower()
    if event in ("check_run", "check_suite"):
        obj = payload.get(event) if isinstance(payload.get(event), dict) else {}
        app = obj.get("app") if isinstance(obj.get("app"), dict) else {}
        ours = bool(bot) and (app.get("slug") or "").lower() == bot.removesuffix("[bot]")
        if ours or (event == "check_run" and obj.get("name") == CHECK_RUN_NAME):
            return f"{event}: our own check run"
        return None
    if not bot or _login(payload.get("sender")) != bot:
        return None
    action = payload.get("action")
    if event in ("pull_request_review_comment", "pull_request_review_thread", "pull_request_review"):
        return f"{event} {action}: our own reply or resolve"
    if event == "pull_request" and action in ("review_requested", "review_request_removed", "labeled", "unlabeled"):
        return f"pull_request {action}: our own request"
    return None


def _sync_ref(delivery_id: str, repo: str | None, *, sha: Any = None, branch: Any = None) -> tuple[Wake, ...]:
    if not repo or not (isinstance(sha, str) or isinstance(branch, str)):
        return ()
    payload = {"repo": repo.lower(), "sha": sha if isinstance(sha, str) else None,
               "branch": branch if isinstance(branch, str) else None}
    return (Wake("sync_ref", f"sync_ref:{repo.lower()}:{delivery_id}", None, payload),)


def route(event: str, payload: dict, delivery_id: str, rules: EnrollRules = EnrollRules()) -> Routed:
    if event not in KNOWN_EVENTS:
        return Routed("ignored", f"unhandled event {event!r}")
    repo = _repo(payload)
    if event in ("ping", "installation", "installation_repositories", "installation_target"):
        return Routed("ignored", f"{event}: nothing to do")
    if (why := echo(event, payload, rules)) is not None:
        return Routed("ignored", why)

    action = payload.get("action")
    if event.startswith("pull_request"):
        pr = payload.get("pull_request")
        key = _pr_key(repo, pr.get("number") if isinstance(pr, dict) else None)
        wakes = _sync(delivery_id, key)
        if event == "pull_request":
            wakes += _enroll(delivery_id, key, payload, rules)
        if event == "pull_request_review_comment" and action == "created":
            wakes += _command(delivery_id, key, payload.get("comment"), "review")
    elif event == "issue_comment":
        issue = payload.get("issue")
        if not isinstance(issue, dict) or not issue.get("pull_request"):
            return Routed("ignored", "comment on an issue, not a pull request")
        if action != "created":
            return Routed("ignored", f"issue_comment {action}: only new comments are commands")
        wakes = _command(delivery_id, _pr_key(repo, issue.get("number")), payload.get("comment"), "issue")
        if not wakes:
            return Routed("ignored", "comment is not a command")
    elif event in ("check_suite", "check_run"):
        obj = payload.get(event)
        obj = obj if isinstance(obj, dict) else {}
        prs = obj.get("pull_requests") if isinstance(obj.get("pull_requests"), list) else []
        keys = [_pr_key(repo, p.get("number")) for p in prs if isinstance(p, dict)]
        wakes = _sync(delivery_id, *keys) or _sync_ref(delivery_id, repo, sha=obj.get("head_sha"))
    elif event == "status":
        wakes = _sync_ref(delivery_id, repo, sha=payload.get("sha"))
    else:  # push
        ref = payload.get("ref")
        branch = ref.removeprefix("refs/heads/") if isinstance(ref, str) and ref.startswith("refs/heads/") else None
        wakes = _sync_ref(delivery_id, repo, branch=branch) if branch else ()

    if not wakes:
        return Routed("ignored", f"{event}: no pull request or ref in the payload")
    return Routed("queued", f"{event}: {len(wakes)} job(s)", wakes)
