"""What every renderer needs: the state (for users, roles) and the absolute base URL."""

from __future__ import annotations

from dataclasses import dataclass

from ..state import Repo, State


@dataclass
class RenderContext:
    state: State
    base_url: str  # the REST base URL, with a trailing slash

    def api(self, path: str) -> str:
        return self.base_url + path.lstrip("/")

    def html(self, path: str) -> str:
        # GHES-style: web pages at the host root, next to (never clashing with) /repos/... API paths.
        return self.base_url + path.lstrip("/")

    def association(self, repo: Repo, login: str) -> str:
        """author_association as GitHub reports it for this user on this repo."""
        if login.lower() == repo.owner.lower():
            return "OWNER"
        role = self.state.role(repo, login)
        return "COLLABORATOR" if role else "NONE"
