"""`per_page`/`page` pagination with an absolute `Link` header, as GitHub sends it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

from starlette.datastructures import URL, QueryParams

from .errors import Unprocessable

T = TypeVar("T")
# The `/repos/{owner}/{repo}` of a path (after any API root, e.g. GHES's /api/v3), and the rest.
_REPO_PATH = re.compile(r"^(.*?)/repos/[^/]+/[^/]+(/.*)?$")
DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100


def _int(query: QueryParams, name: str, default: int) -> int:
    raw = query.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise Unprocessable(f"{name} must be an integer", name) from None


def paginate(url: URL, items: Sequence[T], repository_id: int | None = None) -> tuple[list[T], str | None]:
    """The requested page of `items` and its Link header (None when everything fits).

    `url` is the request's own absolute URL, so the links point back at whatever host and port
    the client used. A listing of a repository (`repository_id`) links its pages by the
    repository's id, as GitHub does: `/repos/{owner}/{repo}/pulls` pages on at
    `/repositories/{repository_id}/pulls?page=2`.
    """
    if repository_id is not None:
        m = _REPO_PATH.match(url.path)
        if m:
            url = url.replace(path=f"{m[1]}/repositories/{repository_id}{m[2] or ''}")
    query = QueryParams(url.query)
    per_page = min(max(_int(query, "per_page", DEFAULT_PER_PAGE), 1), MAX_PER_PAGE)
    page = max(_int(query, "page", 1), 1)
    last = max((len(items) + per_page - 1) // per_page, 1)
    start = (page - 1) * per_page
    chunk = list(items[start:start + per_page])
    links = []
    if page < last:
        links += [(page + 1, "next"), (last, "last")]
    if page > 1:
        links += [(1, "first"), (min(page - 1, last), "prev")]
    if not links:
        return chunk, None
    return chunk, ", ".join(f'<{url.include_query_params(page=n)}>; rel="{rel}"'
                            for n, rel in links)
