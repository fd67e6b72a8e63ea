"""The two keys everything is stored under: a pull request's `owner/repo#N` (`PrKey`) and a run's
process key (`ProcessKey`).

A key is parsed once where it comes in (a webhook, a command line, an API path) and travels as
its type from there on; the columns hold its text, and `stored_pr_key` reads that text back."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NewType

from pydantic import GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]{1,100}"
_KEY = re.compile(rf"^(?P<owner>{_OWNER})/(?P<repo>{_REPO})#(?P<number>[1-9][0-9]{{0,9}})$")
MAX_NUMBER = 9_999_999_999  # the largest number a key takes: ten digits, as `_KEY` and `_URL` read it
_URL = re.compile(
    rf"^https?://[^/\s]+/(?P<owner>{_OWNER})/(?P<repo>{_REPO})/pull/(?P<number>[1-9][0-9]{{0,9}})/?$"
)


ProcessKey = NewType("ProcessKey", str)
"""The key of one run of a PR (`run-<hex>`), never reused: what fences a run's writes."""


class PrKeyError(ValueError):
    """A string that is not `owner/repo#N`."""


class PrKey(str):
    """`owner/repo#N`, parsed: its text is the key (what a column stores, a log line prints, JSON
    carries), its parts are read without parsing again. A `str` so that it crosses those edges
    as it is; a type of its own so that an unparsed string is not taken for one."""

    owner: str
    repo: str
    number: int

    def __new__(cls, owner: str, repo: str, number: int) -> PrKey:
        key = super().__new__(cls, f"{owner}/{repo}#{number}")
        object.__setattr__(key, "owner", owner)
        object.__setattr__(key, "repo", repo)
        object.__setattr__(key, "number", int(number))
        return key

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a PrKey is immutable: cannot set {name}")

    # str's own takes the text alone; a PrKey is rebuilt (pickle, copy) from its parts.
    def __getnewargs__(self) -> tuple[str, str, int]:  # type: ignore[override]
        return (self.owner, self.repo, self.number)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        # In a model: validated from its text (a PrKey passes as it is), dumped as its text.
        return core_schema.no_info_after_validator_function(
            lambda text: text if isinstance(text, PrKey) else parse_pr_key(text), core_schema.str_schema(),
            serialization=core_schema.to_string_ser_schema())

    @property
    def full_repo(self) -> str:
        return f"{self.owner}/{self.repo}"

    @classmethod
    def of(cls, owner: str, repo: str, number: int) -> PrKey:
        # GitHub owner and repo names are case-insensitive: one PR must have one key.
        return cls(owner.lower(), repo.lower(), int(number))


def parse_pr_key(text: str) -> PrKey:
    """Parse `owner/repo#N` (or a PR URL); raise PrKeyError with a readable message otherwise."""
    if not isinstance(text, str):
        raise PrKeyError(f"not a PR key: {text!r}")
    s = text.strip()
    m = _KEY.match(s) or _URL.match(s)
    if m is None or m["repo"] in {".", ".."}:
        raise PrKeyError(f"malformed PR key {text!r}: expected owner/repo#N")
    return PrKey.of(m["owner"], m["repo"], int(m["number"]))


def try_parse_pr_key(text: object) -> PrKey | None:
    """For handlers: a malformed key is None, never an exception."""
    try:
        return parse_pr_key(text)  # type: ignore[arg-type]
    except PrKeyError:
        return None


@lru_cache(maxsize=4096)
def stored_pr_key(text: str) -> PrKey:
    """The key a column holds, as a `PrKey`. Stored keys were canonical when written, so a
    malformed one is a bug (PrKeyError). Cached: the same few keys are read over and over."""
    return parse_pr_key(text)
