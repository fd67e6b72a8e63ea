"""`since`, `sort` and `direction` on a repository-wide comment listing, as GitHub reads them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TypeVar

from ..errors import Unprocessable
from ..gateway import ApiRequest

T = TypeVar("T")
_SORTS = ("created", "updated")


def since_sorted(req: ApiRequest, items: Sequence[T], *, created: Callable[[T], datetime],
                 updated: Callable[[T], datetime], ident: Callable[[T], int]) -> list[T]:
    """The items updated at or after `since` (GitHub stamps to the second and its `since` takes
    that second in), ordered by `sort` (`created` by default, which is id order) and
    `direction` (ascending unless a `sort` is given, then descending unless told)."""
    since = None
    if (raw := req.query.get("since")) is not None:
        try:
            since = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            since = None
        if since is None or since.tzinfo is None:
            raise Unprocessable("since must be an ISO 8601 timestamp", "since")
    sort = req.query.get("sort", "created")
    if sort not in _SORTS:
        raise Unprocessable("sort must be created or updated", "sort")
    direction = req.query.get("direction", "desc" if "sort" in req.query else "asc")
    if direction not in ("asc", "desc"):
        raise Unprocessable("direction must be asc or desc", "direction")
    chosen = [c for c in items if since is None or updated(c) >= since]
    stamp = created if sort == "created" else updated
    chosen.sort(key=lambda c: (stamp(c), ident(c)), reverse=direction == "desc")
    return chosen
