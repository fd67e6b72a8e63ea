"""What the configured credential reaches beyond one repository: a token git can clone and push
with, the App's installations and the repositories they reach, a webhook's delivery log and its
redeliveries (the App's own read as the App, not on an installation's budget), and the rate
limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from githubkit import AppInstallationAuthStrategy, TokenAuthStrategy

from bot.github import shapes
from bot.github.answers import checked, decoded
from bot.github.errors import GitHubError
from bot.github.installations import InstallationsAuthStrategy
from bot.github.stamps import parse_time
from bot.github.transport import Transport


class AccountEndpoints(Transport):
    # installation (None: the one configured) -> (token, when it expires); set by GitHubClient.__init__
    _clone_tokens: dict[int | None, tuple[str, datetime]]

    @property
    def is_app(self) -> bool:
        """Authenticated as a GitHub App (one installation or several); only an App can read its
        delivery log."""
        return isinstance(self.gh.auth, AppInstallationAuthStrategy | InstallationsAuthStrategy)

    async def clone_token(self, owner: str | None = None, repo: str | None = None) -> str | None:
        """A token git can clone and push with: the configured one, or for a GitHub App a
        fresh token of the installation (the one on `owner/repo` when the App serves several;
        minted once per installation, reused until ten minutes before it expires)."""
        auth = self.gh.auth
        if isinstance(auth, TokenAuthStrategy):
            return auth.token
        if isinstance(auth, AppInstallationAuthStrategy):
            installation = auth.installation_id
        elif isinstance(auth, InstallationsAuthStrategy):
            if not owner or not repo:
                raise GitHubError("clone_token: name the repository: the App serves several installations")
            installation = await self.installation_for(owner, repo)
        else:
            return None
        now = datetime.now(UTC)
        cached = self._clone_tokens.get(installation)
        if cached and cached[1] - timedelta(minutes=10) > now:
            return cached[0]
        url = f"/app/installations/{installation}/access_tokens"
        async with self.gh.with_auth(auth.as_app()) as app:
            data = await self._call(f"POST {url}", lambda: app.arequest("POST", url), metered=False)
        body = checked(f"POST {url}", decoded(f"POST {url}", data.raw_response), shapes.Token)
        expires = parse_time(body.get("expires_at")) or now
        self._clone_tokens[installation] = (body["token"], expires)
        return body["token"]

    async def app_installations(self) -> list[dict]:
        """GET /app/installations as the App (every page): the accounts the App is installed on."""
        found: list[dict] = []
        url: str | None = "/app/installations"
        params: dict | None = {"per_page": 100}
        while url:
            raw = await self._as_app("GET", url, params=params)
            found.extend(checked(f"GET {url}", decoded(f"GET {url}", raw), list[shapes.Installation]))
            url, params = raw.links.get("next", {}).get("url"), None
        return found

    async def installation_repositories(self) -> list[str]:
        """Full names of the repositories the App installation reaches (every page); for an App
        serving several installations, those of every installation (GET /app/installations as
        the App), whose installation is then known without a lookup."""
        if not self.per_installation:
            pages = await self._pages("/installation/repositories", shape=shapes.InstallationRepositories)
            return [r["full_name"] for page in pages for r in page["repositories"]]
        names: list[str] = []
        for installation in await self.app_installations():
            with self.for_installation(int(installation["id"])):
                pages = await self._pages("/installation/repositories", shape=shapes.InstallationRepositories)
            for name in (r["full_name"] for page in pages for r in page["repositories"]):
                self.installations.learn(name, int(installation["id"]))
                names.append(name)
        return names

    async def hook_deliveries(self, *, per_page: int = 100, cursor: str | None = None,
                              hook: str | None = None) -> tuple[list[dict], str | None]:
        """One page of a webhook's delivery log (one entry per attempt, newest first) and the
        cursor of the next page (None on the last). `hook`: an organisation's or a repository's
        webhook (`orgs/acme/hooks/12`, `repos/acme/widgets/hooks/34`), read with the token and
        charged to its rate limit; None: the App's own, read as the App."""
        params: dict[str, Any] = {"per_page": per_page} | ({"cursor": cursor} if cursor else {})
        what = f"GET /{hook or 'app/hook'}/deliveries"
        if hook is None:
            raw = await self._as_app("GET", "/app/hook/deliveries", params=params)
        else:
            raw = await self._request("GET", f"/{hook}/deliveries", params=params)
        next_url = raw.links.get("next", {}).get("url")
        page = checked(what, decoded(what, raw), shapes.DELIVERIES)
        return page, httpx.URL(next_url).params.get("cursor") if next_url else None

    async def redeliver(self, delivery_id: int, *, hook: str | None = None) -> None:
        """Ask GitHub to send a logged delivery again, with its guid; it answers 202 at once and
        sends it later, as a new log entry with `redelivery: true`. `hook` as for
        `hook_deliveries`."""
        if hook is None:
            await self._as_app("POST", f"/app/hook/deliveries/{delivery_id}/attempts")
        else:
            await self._request("POST", f"/{hook}/deliveries/{delivery_id}/attempts")

    async def rate_limit(self) -> dict:
        """GET /rate_limit (free: it does not count against the limit it reports)."""
        return await self._json("GET", "/rate_limit", shape=shapes.RateLimit)
