"""A repository's own settings: `.github/convergebot.toml` on its default branch, over the global config.

A repository may set a few things about its own PRs (how many rounds, whose review counts,
which checks must pass, whom to ask, how to merge, what the fixer should know); nothing else.
Secrets, the database, the server and every other section stay the operator's: a key outside
`ALLOWED` makes the whole file invalid, as does a value the global config's own models refuse.

An invalid file never stops anything: the repository's PRs go on with the global settings, the
problem is logged once per version of the file, and each PR's check run says what is wrong.

The file is read through the client's HTTP cache, so an unchanged file is a 304 (free of rate
limit), and the parsed result is kept per repository in this process: a file is revalidated at
most once per poll interval however many PRs the repository has. A missing file is a 404, which
GitHub does not answer conditionally and which counts against the limit, so it is asked again
only once an hour (or per scan interval, if longer); a `push` to the default branch touching the
file forgets either at once (`forget`), so only a file added while its push's webhook was lost
waits the hour.
"""

from __future__ import annotations

import re
import time
import tomllib
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import ValidationError

from bot.config import Config
from bot.github.errors import GitHubError, RateLimited, Unavailable
from bot.runtime.context import Bounded, Runtime
from storage.locks import KeyedLocks

log = structlog.get_logger(__name__)

PATH = ".github/convergebot.toml"
PROBLEM_CAP = 1000  # characters of the problem kept: it goes into every PR's check run

# What a repository may set, by section: its PRs' settings, never the bot's.
ALLOWED: dict[str, tuple[str, ...]] = {
    "convergence": ("max_rounds", "reviewers", "reviewer", "required_checks", "maintainers", "block_on"),
    "merge": ("method",),
    "fixer": ("prompt_append",),
}
_ALLOWED_TEXT = "; ".join(f"[{s}] {', '.join(keys)}" for s, keys in ALLOWED.items())


class RepoConfigError(ValueError):
    """An invalid repository file; the message names the file, the line where known, and why."""


@dataclass(frozen=True)
class RepoConfig:
    config: Config  # the settings for the repository's PRs: the file's over the global ones
    sha: str | None = None  # the file's blob sha; None without a file
    problem: str | None = None  # why the file was ignored, None when it was not


def parse(text: str, base: Config) -> Config:
    """`base` with the file's settings over it; RepoConfigError naming what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RepoConfigError(f"{PATH}: invalid TOML: {e}") from None
    except RecursionError:  # tomllib recurses per nested array or table: a few hundred suffice
        raise RepoConfigError(f"{PATH}: invalid TOML: nested too deeply") from None
    updates: dict[str, Any] = {}
    for section, values in data.items():
        if section not in ALLOWED and not isinstance(values, dict):
            raise RepoConfigError(f"{PATH}: unknown key {section!r} (allowed: {_ALLOWED_TEXT})")
        if section not in ALLOWED:
            raise RepoConfigError(f"{PATH}{_at(text, section)}: [{section}] cannot be set by a "
                                  f"repository (allowed: {_ALLOWED_TEXT})")
        if not isinstance(values, dict):
            raise RepoConfigError(f"{PATH}{_at(text, section)}: {section} must be a table ([{section}])")
        for key in values:
            if key not in ALLOWED[section]:
                raise RepoConfigError(f"{PATH}{_at(text, section, key)}: unknown key {key!r} in "
                                      f"[{section}] (allowed: {_ALLOWED_TEXT})")
        if section == "convergence" and "reviewers" in values and "reviewer" not in values:
            # The repository's own list: the global `[[convergence.reviewer]]` tables would
            # otherwise stand in front of it (tables, when given, are the list).
            values = {**values, "reviewer": []}
        model = type(getattr(base, section))
        try:
            # The global section's own model validates the merged values: the same bounds apply.
            updates[section] = model.model_validate({**getattr(base, section).model_dump(), **values})
        except ValidationError as e:
            first = e.errors()[0]
            key = str(first["loc"][0]) if first["loc"] else ""
            raise RepoConfigError(f"{PATH}{_at(text, section, key)}: [{section}] {key}: {first['msg']}") from None
    return base.model_copy(update=updates)


def _at(text: str, section: str, key: str | None = None) -> str:
    """` line N` where the section's header (or its key) is, for the message; "" if not found.
    tomllib gives lines only for syntax errors, so a refused value is found by its key."""
    header = re.compile(rf"^\s*\[\s*{re.escape(section)}\s*\]")
    in_section = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("["):
            in_section = bool(header.match(line))
            if in_section and key is None:
                return f" line {n}"
            continue
        if in_section and key and re.match(rf"^\s*\"?{re.escape(key)}\"?\s*=", line):
            return f" line {n}"
    return ""


def load(found: tuple[str, str] | None, base: Config) -> RepoConfig:
    """What a read of the file (`(text, sha)`, None for no file) means for the repository."""
    if found is None:
        return RepoConfig(base)
    text, sha = found
    try:
        return RepoConfig(parse(text, base), sha)
    except RepoConfigError as e:
        return RepoConfig(base, sha, str(e)[:PROBLEM_CAP])


# How long a missing file stays missing without a push that adds it: a 404 spends the rate
# limit, and 1,000 repositories without the file asked once per scan interval cost 12,000 an hour.
ABSENT_SECONDS = 3600.0

@dataclass
class _Entry:
    result: RepoConfig
    read_at: float  # time.monotonic() of the read


REPOSITORIES_REMEMBERED = 10_000  # repositories whose config file this process keeps


@dataclass
class RepoConfigs:
    # By repository, lowercased; the least recently read go past the bound (read again if needed).
    entries: dict[str, _Entry] = field(default_factory=lambda: Bounded(REPOSITORIES_REMEMBERED))
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    warned: set[tuple[str, str]] = field(default_factory=set)  # (repository, sha) logged invalid


def _cache(rt: Runtime) -> RepoConfigs:
    if rt.repo_configs is None:
        rt.repo_configs = RepoConfigs()
    return rt.repo_configs


def _fresh(rt: Runtime, entry: _Entry) -> bool:
    cfg = rt.config
    ttl = cfg.poller.interval_seconds if entry.result.sha else max(cfg.poller.interval_seconds,
                                                                   cfg.scan.interval_seconds, ABSENT_SECONDS)
    return time.monotonic() - entry.read_at < ttl


async def repo_config(rt: Runtime, repo: str) -> RepoConfig:
    """The repository's settings, read from GitHub when the process's copy is due again.

    A read that fails (rate limit, 5xx, no answer, a 401) keeps the copy there is until the
    next interval; with none, the error goes to the caller like any other read of the step. A
    refusal (a 403: credentials without read access to contents) means the global settings: the
    bot must not stop for a file it cannot read."""
    cache, name = _cache(rt), repo.lower()
    if (entry := cache.entries.get(name)) is not None and _fresh(rt, entry):
        return entry.result
    # One read per repository at a time: its PRs stepping side by side wait for it.
    async with cache.locks.hold(name):
        if (entry := cache.entries.get(name)) is not None and _fresh(rt, entry):
            return entry.result
        owner, _, short = repo.partition("/")
        try:
            found = await rt.github.repository(owner, short).file_text(PATH)
        except GitHubError as e:
            if isinstance(e, (RateLimited, Unavailable)) or e.status == 401:
                # For now (rate limit, 5xx, no answer) or not for this token (a 401 while an App
                # is reinstalled): the copy there is stands; a repository's squash or required
                # checks must not give way to the global settings for an interval.
                if entry is None:
                    raise
                log.warning("repo_config.unreadable", repo=repo, error=str(e))
                entry.read_at = time.monotonic()
                return entry.result
            if entry is None or entry.result.sha is not None:
                log.warning("repo_config.refused", repo=repo, error=str(e))
            found = None
        result = load(found, rt.config)
        cache.entries[name] = _Entry(result, time.monotonic())
        if result.problem and (name, result.sha or "") not in cache.warned:
            cache.warned.add((name, result.sha or ""))
            log.warning("repo_config.invalid", repo=repo, file=PATH, sha=result.sha, error=result.problem)
        elif entry is None or entry.result.sha != result.sha:
            log.info("repo_config.read", repo=repo, sha=result.sha)
        return result


async def effective_config(rt: Runtime, repo: str) -> Config:
    """The settings for a PR of `repo`: the one way every PR setting is read."""
    return (await repo_config(rt, repo)).config


def current(rt: Runtime, repo: str) -> RepoConfig:
    """The repository's settings as this process last read them, without reading (the global
    ones if it has not): for code inside a transaction, after the step read them."""
    entry = _cache(rt).entries.get(repo.lower())
    return entry.result if entry is not None else RepoConfig(rt.config)


def forget(rt: Runtime, repo: str) -> None:
    """Read the file again at the next use (a push changed it). The HTTP cache still holds the
    last answer, so an unchanged file costs a 304."""
    entry = _cache(rt).entries.get(repo.lower())
    if entry is not None:
        entry.read_at = float("-inf")


def touched(payload: dict) -> str | None:
    """The repository (`owner/name`) whose file a `push` webhook to its default branch changed,
    else None: the push's own commit list says so, no read needed."""
    repo = found if isinstance(found := payload.get("repository"), dict) else {}
    branch, name = repo.get("default_branch"), repo.get("full_name")
    if not isinstance(name, str) or payload.get("ref") != f"refs/heads/{branch}":
        return None
    commits = payload.get("commits")
    for commit in commits if isinstance(commits, list) else []:
        if isinstance(commit, dict) and any(isinstance(paths := commit.get(kind), list) and PATH in paths
                                            for kind in ("added", "modified", "removed")):
            return name
    return None
