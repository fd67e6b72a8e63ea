"""`owner/repo#N`, the canonical key of a pull request."""

from __future__ import annotations

import re
from dataclasses import dataclass

_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})"
_REPO = r"[A-Za-z0-9._-]{1,100}"
_KEY = re.compile(rf"^(?P<owner>{_OWNER})/(?P<repo>{_REPO})#(?P<number>[1-9][0-9]{{0,9}})$")
MAX_NUMBER = 9_999_999_999  # the largest number a key takes: ten digits, as `_KEY` and `_URL` read it
_URL = re.compile(
    rf"^https?://[^/\s]+/(?P<owner>{_OWNER})/(?P<repo>{_REPO})/pull/(?P<number>[1-9][0-9]{{0,9}})/?$"
)


class PrKeyError(ValueError):
    """A string that is not `owner/repo#N`."""


@dataclass(frozen=True, order=True)
class PrKey:
    owner: str
    repo: str
    number: int

    def __str__(self) -> str:
        return f"{self.owner}/{self.repo}#{self.number}"

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
