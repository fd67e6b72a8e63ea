"""User objects (`simple-user`): bots are logins ending in `[bot]`, typed `Bot`."""

from __future__ import annotations

from .context import RenderContext


def user(ctx: RenderContext, login: str) -> dict:
    u = ctx.state.user(login)
    url = ctx.api(f"users/{u.login}")
    return {
        "login": u.login,
        "id": u.id,
        "node_id": u.node_id,
        "avatar_url": ctx.html(f"avatars/{u.login}"),
        "gravatar_id": "",
        "url": url,
        "html_url": ctx.html(u.login),
        "followers_url": f"{url}/followers",
        "following_url": f"{url}/following{{/other_user}}",
        "gists_url": f"{url}/gists{{/gist_id}}",
        "starred_url": f"{url}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{url}/subscriptions",
        "organizations_url": f"{url}/orgs",
        "repos_url": f"{url}/repos",
        "events_url": f"{url}/events{{/privacy}}",
        "received_events_url": f"{url}/received_events",
        "type": u.type,
        "user_view_type": "public",
        "site_admin": False,
    }
