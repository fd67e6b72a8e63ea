"""The webhook delivery log: one entry per attempt, as `GET /app/hook/deliveries` lists it.

GitHub keeps an entry for every attempt of every delivery (a redelivery is a new entry with the
same `guid` and `redelivery: true`) and never delivers again by itself: an App that wants what it
missed reads this log and asks for a redelivery. Here a delivery dropped by a fault or the chaos
is logged as GitHub logs a hook it could not reach (`status_code` 0), so the log shows every
delivery the receiver did not get.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .ids import iso, now

# GitHub's delivery ids are large integers that only grow.
FIRST_LOG_ID = 90_000_000_001


@dataclass
class LogEntry:
    id: int
    guid: str
    event: str
    action: str | None
    body: bytes
    delivered_at: datetime
    redelivery: bool
    duration: float
    status_code: int  # 0: no HTTP answer (dropped, connection refused, timed out)
    status: str  # "OK", "Invalid HTTP Response: 503", "failed to connect", ...
    repository_id: int | None
    installation_id: int | None
    request_headers: dict[str, str] = field(default_factory=dict)
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: str | None = None

    def item(self) -> dict[str, Any]:
        """The list shape (`hook-delivery-item`)."""
        return {"id": self.id, "guid": self.guid, "delivered_at": iso(self.delivered_at),
                "redelivery": self.redelivery, "duration": round(self.duration, 2),
                "status": self.status, "status_code": self.status_code, "event": self.event,
                "action": self.action, "installation_id": self.installation_id,
                "repository_id": self.repository_id, "throttled_at": None}

    def full(self) -> dict[str, Any]:
        """The single-delivery shape (`hook-delivery`): the item plus request and response."""
        return {**self.item(), "url": "",
                "request": {"headers": self.request_headers, "payload": json.loads(self.body)},
                "response": {"headers": self.response_headers, "payload": self.response_body}}


def status_text(status_code: int, error: str | None = None) -> str:
    if 200 <= status_code < 300:
        return "OK"
    if status_code:
        return f"Invalid HTTP Response: {status_code}"
    return error or "failed to connect"


class HookLog:
    def __init__(self) -> None:
        self.entries: list[LogEntry] = []  # oldest first
        self._next_id = FIRST_LOG_ID
        self.installation_id: int | None = None

    def add(self, *, guid: str, event: str, action: str | None, body: bytes, redelivery: bool,
            status_code: int, error: str | None = None, duration: float = 0.0,
            delivered_at: datetime | None = None, request_headers: dict[str, str] | None = None,
            response_headers: dict[str, str] | None = None,
            response_body: str | None = None) -> LogEntry:
        try:
            repository_id = (json.loads(body).get("repository") or {}).get("id")
        except (ValueError, AttributeError):
            repository_id = None
        entry = LogEntry(self._next_id, guid, event, action, body, delivered_at or now(),
                         redelivery, duration, status_code, status_text(status_code, error),
                         repository_id, self.installation_id, dict(request_headers or {}),
                         dict(response_headers or {}), response_body)
        self._next_id += 1
        self.entries.append(entry)
        return entry

    def get(self, entry_id: int) -> LogEntry | None:
        for entry in reversed(self.entries):
            if entry.id == entry_id:
                return entry
        return None

    def page(self, *, before: int | None, per_page: int,
             where: Callable[[LogEntry], bool] | None = None) -> tuple[list[LogEntry], int | None]:
        """Newest first: up to `per_page` entries older than the entry id `before` (None: from the
        newest), and the id the next page starts below (None on the last page). `where`: only
        the entries it keeps (a repository's or an organisation's hook sees only its own)."""
        older = [e for e in reversed(self.entries)
                 if (before is None or e.id < before) and (where is None or where(e))]
        chunk = older[:per_page]
        return chunk, (chunk[-1].id if len(older) > per_page else None)

    def for_guid(self, guid: str) -> list[LogEntry]:
        return [e for e in self.entries if e.guid == guid]
