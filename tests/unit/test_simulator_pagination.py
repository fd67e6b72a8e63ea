"""The simulator's `Link` header: a repository's listing pages on by the repository's id, as
GitHub's does (`/repositories/8514/...`), under whatever API root the client used."""

from __future__ import annotations

import re

from starlette.datastructures import URL

from simulator.pagination import paginate


def _links(header: str | None) -> dict[str, str]:
    return {rel: url for url, rel in re.findall(r'<([^>]+)>; rel="(\w+)"', header or "")}


def test_a_repositorys_listing_links_its_pages_by_the_repositorys_id():
    chunk, link = paginate(URL("http://h:1/repos/acme/app/issues/7/comments?per_page=2"), list(range(5)), 8514)
    assert chunk == [0, 1]
    assert _links(link) == {"next": "http://h:1/repositories/8514/issues/7/comments?per_page=2&page=2",
                            "last": "http://h:1/repositories/8514/issues/7/comments?per_page=2&page=3"}
    # A page asked by id links on by id; an API root (GitHub Enterprise's /api/v3) is kept.
    _, link = paginate(URL("http://h:1/repositories/8514/pulls?page=2&per_page=2"), list(range(5)), 8514)
    assert _links(link)["next"] == "http://h:1/repositories/8514/pulls?per_page=2&page=3"
    _, link = paginate(URL("http://h:1/api/v3/repos/acme/app/pulls?per_page=2"), list(range(5)), 8514)
    assert _links(link)["next"] == "http://h:1/api/v3/repositories/8514/pulls?per_page=2&page=2"


def test_a_listing_of_no_repository_keeps_its_path():
    _, link = paginate(URL("http://h:1/installation/repositories?per_page=1"), [1, 2])
    assert _links(link)["next"] == "http://h:1/installation/repositories?per_page=1&page=2"
    assert paginate(URL("http://h:1/repos/acme/app/pulls"), [1], 8514) == ([1], None)
