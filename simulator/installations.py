"""The App's installations: which accounts (owners) each reaches, and the tokens minted for each.

By default there is one installation that reaches every repository and accepts any installation
id, as a bot configured with one `installation_id` expects. Once a test adds installations
(`sim.add_installation("org-a")`), each reaches the repositories of its owner only, tokens are
minted only for known ids, and a token used on another owner's repository is refused with the 404
GitHub answers there; `requests` counts both, so a test sees which token each org's requests came
with.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass

DEFAULT_INSTALLATION_ID = 1
ANY_OWNER = ""  # the default installation reaches every repository


@dataclass(frozen=True)
class Installation:
    id: int
    owner: str  # the account it is installed on (ANY_OWNER: every repository)

    def reaches(self, owner: str) -> bool:
        return self.owner == ANY_OWNER or self.owner.lower() == owner.lower()


class Installations:
    def __init__(self) -> None:
        self.by_id: dict[int, Installation] = {}
        self.tokens: dict[str, int] = {}  # installation token -> the installation it was minted for
        # (installation id, repository owner, "ok" | "public" | "refused"): requests made with an
        # installation token on a repository (REST paths naming one, GraphQL repository lookups).
        self.requests: Counter[tuple[int, str, str]] = Counter()

    @property
    def explicit(self) -> bool:
        """Installations were added: each reaches its own owner's repositories only."""
        return bool(self.by_id)

    def add(self, owner: str, installation_id: int | None = None) -> Installation:
        if not owner:
            raise ValueError("an installation is on an account: owner must be set")
        if any(i.owner.lower() == owner.lower() for i in self.by_id.values()):
            raise ValueError(f"{owner} already has an installation")
        iid = installation_id or 1000 + len(self.by_id) + 1
        if iid in self.by_id:
            raise ValueError(f"installation {iid} exists")
        self.by_id[iid] = Installation(iid, owner)
        return self.by_id[iid]

    def all(self) -> list[Installation]:
        if not self.explicit:
            return [Installation(DEFAULT_INSTALLATION_ID, ANY_OWNER)]
        return sorted(self.by_id.values(), key=lambda i: i.id)

    def get(self, installation_id: int) -> Installation | None:
        """The installation with that id; by default any id names the one that reaches all."""
        if not self.explicit:
            return Installation(installation_id, ANY_OWNER)
        return self.by_id.get(installation_id)

    def for_owner(self, owner: str) -> Installation | None:
        return next((i for i in self.all() if i.reaches(owner)), None)

    def mint(self, installation: Installation) -> str:
        token = f"ghs_{secrets.token_hex(18)}"
        self.tokens[token] = installation.id
        return token

    def of_token(self, token: str | None) -> Installation | None:
        """The installation a minted token belongs to (None: not an installation token)."""
        if token is None or token not in self.tokens:
            return None
        return self.get(self.tokens[token])

    def admits(self, token: str | None, owner: str, *, public_read: bool = False) -> bool:
        """May this token act on `owner`'s repositories? Tokens that are not installation tokens
        are not scoped here (the token user's access decides). A read of a public repository
        (`public_read`) is let through for any installation's token, as GitHub does, and counted
        as "public" (a PR's fork, read through the base repository's installation). Counted in
        `requests`."""
        installation = self.of_token(token)
        if installation is None or not owner:
            return True
        ok = installation.reaches(owner)
        outcome = "ok" if ok else "public" if public_read else "refused"
        self.requests[(installation.id, owner.lower(), outcome)] += 1
        return outcome != "refused"

    def count(self, installation_id: int | None = None, owner: str | None = None,
              outcome: str | None = None) -> int:
        """Sum of `requests` matching every given part."""
        return sum(n for (i, o, r), n in self.requests.items()
                   if (installation_id is None or i == installation_id)
                   and (owner is None or o == owner.lower()) and (outcome is None or r == outcome))

    def shape(self, installation: Installation, account: str) -> dict:
        """An installation object as GitHub's App endpoints return it."""
        return {"id": installation.id, "account": {"login": account, "type": "Organization"},
                "app_id": 1, "target_type": "Organization", "repository_selection": "all",
                "access_tokens_url": f"/app/installations/{installation.id}/access_tokens",
                "permissions": {"contents": "write", "pull_requests": "write", "checks": "write",
                                "issues": "write", "metadata": "read"}}
