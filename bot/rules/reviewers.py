"""Who reviews a PR, how each is asked, and whether a round waits for it.

Teams run several review bots side by side, and each is asked differently: Copilot through its
review endpoint, a person or team through `requested_reviewers`, CodeRabbit or Gemini by a
comment such as `@coderabbitai review`, and some review every push by themselves. A reviewer is
one of four kinds:

- `copilot`: asked through the Copilot review endpoint;
- `request`: asked through `requested_reviewers` (a user or a team);
- `comment`: asked by posting its `trigger` text as a PR comment;
- `automatic`: never asked, only waited for (it reviews each push by itself).

A round waits for a fresh review of the head from every `required` reviewer, each for at most its
own timeout; an optional reviewer's review is read when it is there, never waited for.

The old form, `reviewers = ["login", ...]`, still works: a Copilot login is `copilot`, every other
login `request`, all required. `[[convergence.reviewer]]` tables, when given, are the list.

Pure: no I/O, so the rules (engine/decide.py) and the config loader may both import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

COPILOT_LOGIN = "copilot-pull-request-reviewer[bot]"
KINDS = ("copilot", "request", "comment", "automatic")
# Most severe first; a finding with no marker of its own gets its reviewer's default.
SEVERITIES = ("critical", "major", "minor", "nit")
DEFAULT_SEVERITY: Final = "major"

Kind = Literal["copilot", "request", "comment", "automatic"]
Severity = Literal["critical", "major", "minor", "nit"]


class ReviewerConfig(BaseModel):
    """One `[[convergence.reviewer]]` table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    login: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
    kind: Kind | None = None  # None: `copilot` for the Copilot login, `request` otherwise
    trigger: str = Field("", max_length=500)  # a `comment` reviewer's trigger, e.g. "@coderabbitai review"
    required: bool = True
    timeout_seconds: float | None = Field(None, gt=0)  # None: [convergence] review_wait_timeout_seconds
    default_severity: Severity = DEFAULT_SEVERITY


@dataclass(frozen=True)
class Reviewer:
    """A reviewer as the rules see it."""

    login: str
    kind: str = "request"
    trigger: str = ""
    required: bool = True
    timeout: timedelta | None = None  # None: the global review wait timeout
    default_severity: str = DEFAULT_SEVERITY


def normalise(login: str) -> str:
    """A login compared as GitHub shows it in reviews and comments: `x[bot]` reviews as `x` too."""
    return login.strip().lower().removesuffix("[bot]")


def kind_of(login: str) -> str:
    return "copilot" if normalise(login) == normalise(COPILOT_LOGIN) else "request"


def validate(entries: list[ReviewerConfig]) -> list[ReviewerConfig]:
    """Refuse what cannot work: a comment reviewer with no trigger, a login given twice."""
    seen: set[str] = set()
    for entry in entries:
        if (entry.kind or kind_of(entry.login)) == "comment" and not entry.trigger.strip():
            raise ValueError(f"reviewer {entry.login!r} is asked by comment but has no trigger")
        if normalise(entry.login) in seen:
            raise ValueError(f"reviewer {entry.login!r} is listed twice")
        seen.add(normalise(entry.login))
    return entries


def from_config(logins: list[str] | tuple[str, ...],
                tables: list[ReviewerConfig] | tuple[ReviewerConfig, ...] = ()) -> tuple[Reviewer, ...]:
    """The reviewers a `[convergence]` section names: its tables if any, else its login list."""
    if tables:
        return tuple(
            Reviewer(login=t.login, kind=t.kind or kind_of(t.login), trigger=t.trigger.strip(),
                     required=t.required,
                     timeout=timedelta(seconds=t.timeout_seconds) if t.timeout_seconds else None,
                     default_severity=t.default_severity)
            for t in tables
        )
    return tuple(Reviewer(login=login, kind=kind_of(login)) for login in logins)


def roster(obj: Any) -> tuple[Reviewer, ...]:
    """The reviewers of a Config, its `[convergence]` section, or the engine's Settings."""
    if hasattr(obj, "convergence"):
        obj = obj.convergence
    if hasattr(obj, "roster"):  # engine Settings
        roster_: tuple[Reviewer, ...] = obj.roster
        return roster_
    return from_config(getattr(obj, "reviewers", ()), getattr(obj, "reviewer", ()))


def find(obj: Any, login: str | None) -> Reviewer | None:
    """The configured reviewer with this login (as GitHub shows it), else None."""
    if not login:
        return None
    name = normalise(login)
    return next((r for r in roster(obj) if normalise(r.login) == name), None)


def default_severity(config_or_settings: Any, login: str | None) -> str:
    """The severity of a finding by `login` that carries no marker of its own: its reviewer's
    `default_severity`, "major" for anyone not configured (a person's comment blocks)."""
    reviewer = find(config_or_settings, login)
    return reviewer.default_severity if reviewer else DEFAULT_SEVERITY
