"""Scenario files (TOML or JSON): repos, collaborators, PRs, scripted reviewers, checks.

Every error names the field that is wrong, e.g. `repos[0].pulls[1].files: expected a table of
path = "content"`, so a typo in a scenario is fixed in one look.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .state import COPILOT_LOGIN, MERGEABLE_STATES, ROLES, ReviewerScript, ReviewStep, ThreadSpec

if TYPE_CHECKING:
    from .simulator import Simulator

_MISSING = object()


class ScenarioError(ValueError):
    pass


@dataclass
class CheckSpec:
    name: str
    status: str = "completed"
    conclusion: str | None = "success"


@dataclass
class StatusSpec:
    context: str
    state: str = "success"
    description: str | None = None


@dataclass
class PullSpec:
    title: str
    head: str
    files: dict[str, str]
    base: str | None = None
    body: str = ""
    author: str = "octocat"
    labels: list[str] = field(default_factory=list)
    draft: bool = False
    mergeable_state: str | None = None
    reviewers: list[ReviewerScript] = field(default_factory=list)
    check_runs: list[CheckSpec] = field(default_factory=list)
    statuses: list[StatusSpec] = field(default_factory=list)


@dataclass
class RepoSpec:
    name: str
    default_branch: str = "main"
    description: str | None = None
    files: dict[str, str] = field(default_factory=dict)
    collaborators: dict[str, str] = field(default_factory=dict)
    reviewers: list[ReviewerScript] = field(default_factory=list)
    pulls: list[PullSpec] = field(default_factory=list)


@dataclass
class Scenario:
    repos: list[RepoSpec]
    source: str = "<scenario>"


class _Table:
    """Typed reads from one table; unknown keys are errors, not silently ignored."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(f"{where}: expected a table, got {type(data).__name__}")
        self.data, self.where = data, where
        self.seen: set[str] = set()

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if default is _MISSING:
                raise ScenarioError(f"{self.where}.{key}: required")
            return default
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise ScenarioError(f"{self.where}.{key}: expected {name}, got {value!r}")
        return value

    def strings(self, key: str) -> dict[str, str]:
        value = self.get(key, dict, {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise ScenarioError(f"{self.where}.{key}: expected a table of name = \"text\"")
        return dict(value)

    def tables(self, key: str) -> list[tuple[Any, str]]:
        value = self.get(key, list, [])
        return [(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(value)]

    def choice(self, key: str, choices: tuple[str, ...], default: Any) -> Any:
        value = self.get(key, str, default)
        if value is not None and value not in choices:
            raise ScenarioError(f"{self.where}.{key}: must be one of {', '.join(choices)}, "
                                f"got {value!r}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise ScenarioError(f"{self.where}: unknown field {unknown[0]!r}")


def parse_reviewer(data: Any, where: str) -> ReviewerScript:
    t = _Table(data, where)
    steps = []
    for item, at in t.tables("steps"):
        s = _Table(item, at)
        threads = []
        for thread, thread_at in s.tables("threads"):
            th = _Table(thread, thread_at)
            threads.append(ThreadSpec(path=th.get("path", str), line=th.get("line", int),
                                      body=th.get("body", str)))
            th.done()
        steps.append(ReviewStep(threads=threads, body=s.get("body", str, ""),
                                state=s.choice("state", ("COMMENTED", "APPROVED",
                                                         "CHANGES_REQUESTED"), "COMMENTED")))
        s.done()
    if not steps:
        raise ScenarioError(f"{where}.steps: a reviewer needs at least one step")
    script = ReviewerScript(steps=steps, login=t.get("login", str, COPILOT_LOGIN),
                            delay=t.get("delay", float, 0.0), auto=t.get("auto", bool, False),
                            trigger=t.get("trigger", str, ""))
    t.done()
    return script


def _pull(data: Any, where: str) -> PullSpec:
    t = _Table(data, where)
    spec = PullSpec(
        title=t.get("title", str), head=t.get("head", str), files=t.strings("files"),
        base=t.get("base", str, None), body=t.get("body", str, ""),
        author=t.get("author", str, "octocat"), labels=t.get("labels", list, []),
        draft=t.get("draft", bool, False),
        mergeable_state=t.choice("mergeable_state", MERGEABLE_STATES, None),
        reviewers=[parse_reviewer(r, at) for r, at in t.tables("reviewers")])
    for item, at in t.tables("check_runs"):
        c = _Table(item, at)
        spec.check_runs.append(CheckSpec(name=c.get("name", str),
                                         status=c.get("status", str, "completed"),
                                         conclusion=c.get("conclusion", str, "success")))
        c.done()
    for item, at in t.tables("statuses"):
        s = _Table(item, at)
        spec.statuses.append(StatusSpec(
            context=s.get("context", str),
            state=s.choice("state", ("error", "failure", "pending", "success"), "success"),
            description=s.get("description", str, None)))
        s.done()
    if not all(isinstance(name, str) for name in spec.labels):
        raise ScenarioError(f"{where}.labels: expected a list of label names")
    if not spec.files:
        raise ScenarioError(f"{where}.files: a pull request needs at least one changed file")
    t.done()
    return spec


def _repo(data: Any, where: str) -> RepoSpec:
    t = _Table(data, where)
    name = t.get("name", str)
    if name.count("/") != 1 or not all(name.split("/")):
        raise ScenarioError(f"{where}.name: expected owner/name, got {name!r}")
    spec = RepoSpec(name=name, default_branch=t.get("default_branch", str, "main"),
                    description=t.get("description", str, None), files=t.strings("files"),
                    collaborators=t.strings("collaborators"),
                    reviewers=[parse_reviewer(r, at) for r, at in t.tables("reviewers")],
                    pulls=[_pull(p, at) for p, at in t.tables("pulls")])
    for login, role in spec.collaborators.items():
        if role not in ROLES:
            raise ScenarioError(f"{where}.collaborators.{login}: must be one of "
                                f"{', '.join(ROLES)}, got {role!r}")
    t.done()
    return spec


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    t = _Table(data, source)
    repos = [_repo(r, at.removeprefix(f"{source}.")) for r, at in t.tables("repos")]
    t.done()
    return Scenario(repos=repos, source=source)


def load_scenario(path: Path | str) -> Scenario:
    """Read a `.toml` or `.json` scenario; raises ScenarioError naming the file and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ScenarioError(f"{path}: {e.strerror}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise ScenarioError(f"{path}: {e}") from None
    try:
        return parse_scenario(data, path.name)
    except ScenarioError as e:
        raise ScenarioError(f"{path}: {e}") from None


async def apply_scenario(sim: Simulator, scenario: Scenario) -> None:
    for repo in scenario.repos:
        await sim.create_repo(repo.name, default_branch=repo.default_branch,
                              files=repo.files or None, collaborators=repo.collaborators,
                              description=repo.description)
        for script in repo.reviewers:
            sim.set_reviewer(repo.name, script)
        for spec in repo.pulls:
            pr = await sim.open_pr(repo.name, title=spec.title, head=spec.head, base=spec.base,
                                   files=spec.files, body=spec.body, author=spec.author,
                                   labels=spec.labels, draft=spec.draft,
                                   reviewers=spec.reviewers)
            if spec.mergeable_state:
                await sim.set_mergeable(repo.name, pr.number, spec.mergeable_state)
            for check in spec.check_runs:
                await sim.set_check_run(repo.name, pr.head_ref, check.name, status=check.status,
                                        conclusion=check.conclusion)
            for status in spec.statuses:
                await sim.set_status(repo.name, pr.head_ref, status.state,
                                     context=status.context, description=status.description)
