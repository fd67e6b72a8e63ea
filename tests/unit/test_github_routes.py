"""Each URL the client builds has its route template: the metrics' labels carry no PR or sha."""

from __future__ import annotations

import pytest

from bot.github.routes import OTHER, request_of, route_of


@pytest.mark.parametrize(("url", "route"), [
    ("/repos/acme/app/pulls/12", "/repos/{owner}/{repo}/pulls/{number}"),
    ("/repos/acme/app/pulls/12/merge", "/repos/{owner}/{repo}/pulls/{number}/merge"),
    ("https://api.github.com/repos/acme/app/pulls?state=open&page=2", "/repos/{owner}/{repo}/pulls"),
    ("https://ghe.example/api/v3/repos/acme/app/issues/7/comments?page=3",
     "/repos/{owner}/{repo}/issues/{number}/comments"),
    ("/repos/acme/app/pulls/comments", "/repos/{owner}/{repo}/pulls/comments"),
    ("/repos/acme/app/issues/comments/99/reactions", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"),
    ("/repos/acme/app/git/ref/heads/feature/x", "/repos/{owner}/{repo}/git/ref/{ref}"),
    ("/repos/acme/app/compare/release/1.x...0123456789abcdef0123456789abcdef01234567",
     "/repos/{owner}/{repo}/compare/{basehead}"),
    ("/repos/acme/app/commits/0123456789abcdef0123456789abcdef01234567/check-runs",
     "/repos/{owner}/{repo}/commits/{ref}/check-runs"),
    ("/repos/acme/app/collaborators/maint/permission",
     "/repos/{owner}/{repo}/collaborators/{username}/permission"),
    ("/app/hook/deliveries/123/attempts", "/app/hook/deliveries/{delivery_id}/attempts"),
    ("/repos/acme/app/contents/.github/convergebot.toml", "/repos/{owner}/{repo}/contents/{path}"),
    ("https://api.github.com/repositories/8514/issues/7/comments?page=2",
     "/repositories/{repository_id}/issues/{number}/comments"),  # a next link: by repository id
    ("https://ghe.example/api/v3/repositories/8514/pulls?page=2", "/repositories/{repository_id}/pulls"),
    ("/repos/acme/app/pulls/12/files", OTHER),  # not a URL the client builds: never named
])
def test_route_of(url, route):
    assert route_of(url) == route


def test_request_of_a_call_description():
    assert request_of("GET /repos/acme/app/pulls/12") == ("GET", "/repos/{owner}/{repo}/pulls/{number}")
    assert request_of("graphql reviewState") == ("POST", "/graphql")
