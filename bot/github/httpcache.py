"""The HTTP cache's storage: the newest answer per URL, in a dict.

githubkit's own in-memory storage is hishel's SQLite storage on an in-memory database, reached
through a worker thread: every cached GET cost about a dozen thread hand-offs (look up, check
the body is complete, read it back chunk by chunk, store the new one), which was a large share of
the bot's CPU at scale. This storage keeps the same answers in the event loop's own memory.

One answer per URL: hishel 1.4 adds the new answer after a conditional GET that came back 200
and keeps the old one. With two answers stored and a 304 carrying only a weak ETag (GitHub's), it
cannot tell which one the 304 confirms, drops both and sends the read again unconditionally: a
second, rate-limited 200 for an unchanged resource. Only the newest answer is worth revalidating.

An answer is kept lean: of the request, only the headers its response varies on (what hishel
matches a later request against); of the response, every header but those GitHub sends on every
answer and nothing reads back from a cached one (security headers, request ids). Kept whole, a
GitHub answer's headers cost about 5 KB of Python objects, more than most bodies.

The storage is bounded by count, by bytes and by age: past `max_entries` answers, or
`max_bytes` of them (bodies and headers, plus a fixed allowance per answer for the objects that
hold them), the least recently used answer goes (a later read of it is a plain 200, as after a
restart); and an answer nobody read for `max_idle` seconds goes too: a PR still driven is
re-read at least every `poller.full_sync_seconds` (15 min), while a finished PR's answers are
never read again. A PR's answers run from a few to tens of KB, so the cache holds the working
set of the PRs being driven, not the history of every PR ever read.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, replace

from hishel import AsyncBaseStorage, Entry, EntryMeta, Headers, Request, Response
from hishel._core._headers import Vary

MAX_ENTRIES = 50_000
MAX_BYTES = 64 * 1024 * 1024
MAX_IDLE_SECONDS = 30 * 60.0
# What a kept answer costs beyond the bytes of its body, cache key and header text: the objects
# holding them (entry, request, response, metadata, each header's list and strings), measured
# by tracemalloc on GitHub's headers (tests/unit/test_httpcache.py keeps it honest).
PER_ANSWER = 768
PER_HEADER = 64
# Response headers GitHub sends on every answer that nothing reads back from a cached one:
# hishel revalidates with etag / last-modified and matches on vary; githubkit reads the content
# type, link and the rate-limit headers.
UNREAD = frozenset({
    "server", "strict-transport-security", "x-frame-options", "x-content-type-options", "x-xss-protection",
    "referrer-policy", "content-security-policy", "access-control-expose-headers", "access-control-allow-origin",
    "x-github-request-id", "x-oauth-scopes", "x-accepted-oauth-scopes", "x-github-media-type",
    "x-github-api-version-selected",
})


@dataclass
class _Stored:
    entry: Entry  # its response's stream is not kept: `body` is
    body: bytes
    read_at: float = 0.0  # time.monotonic() of its store or its last read


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


# What a kept entry holds for a stream: empty, and shared (nothing reads it; `get_entries` serves
# each answer with a stream of its own). An async generator per entry cost 400 bytes each.
_NO_BODY: Iterator[bytes] = iter(())


def _bodiless(entry: Entry) -> Entry:
    """The entry as kept: its body held apart (`_Stored.body`), never its stream (served with a
    fresh one by `get_entries`); the request's headers those the response varies on, the
    response's all but `UNREAD`."""
    response = entry.response
    varied = {v.lower() for v in Vary.from_value(response.headers.get("vary") or "").values}
    request_headers = {k: v for k, v in _lists(entry.request.headers).items() if k in varied}
    response_headers = {k: v for k, v in _lists(response.headers).items() if k not in UNREAD}
    return replace(entry, request=replace(entry.request, headers=Headers(request_headers), stream=_NO_BODY),
                   response=replace(response, headers=Headers(response_headers), stream=_NO_BODY))


def _lists(headers: Mapping[str, str]) -> dict[str, list[str]]:
    """Header name (lower case) → its values, of hishel's `Headers` or any mapping."""
    return (headers if isinstance(headers, Headers) else Headers(dict(headers)))._headers


def _header_bytes(headers: Mapping[str, str]) -> int:
    return sum(len(k) + sum(len(v) for v in values) + PER_HEADER for k, values in _lists(headers).items())


class NewestAnswerStorage(AsyncBaseStorage):
    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES,
                 max_idle: float = MAX_IDLE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_idle = max_idle
        self.clock = clock
        self._stored: dict[uuid.UUID, _Stored] = {}
        self._newest: OrderedDict[bytes, uuid.UUID] = OrderedDict()  # cache key → newest answer
        self.size_bytes = 0  # what the answers kept count for (`max_bytes`)

    def __len__(self) -> int:
        return len(self._newest)

    @staticmethod
    def _cost(kept: _Stored) -> int:
        e = kept.entry
        return (len(kept.body) + len(e.cache_key) + _header_bytes(e.request.headers)
                + _header_bytes(e.response.headers) + PER_ANSWER)

    def _drop(self, id_: uuid.UUID) -> _Stored | None:
        kept = self._stored.pop(id_, None)
        if kept is not None:
            self.size_bytes -= self._cost(kept)
        return kept

    async def create_entry(self, request: Request, response: Response, key: str,
                           id_: uuid.UUID | None = None) -> Entry:
        entry = Entry(id=id_ or uuid.uuid4(), request=request, response=response,
                      meta=EntryMeta(created_at=time.time()), cache_key=key.encode())
        # Stored once the caller has read the whole body, as hishel's own storages do: an
        # answer cut off half way is never served.
        return replace(entry, response=replace(response, stream=self._keep(entry, response.stream)))

    async def _keep(self, entry: Entry, stream) -> AsyncIterator[bytes]:
        chunks = []
        async for chunk in stream:
            chunks.append(chunk)
            yield chunk
        old = self._newest.pop(entry.cache_key, None)
        if old is not None:
            self._drop(old)
        now = self.clock()
        kept = self._stored[entry.id] = _Stored(_bodiless(entry), b"".join(chunks), now)
        self.size_bytes += self._cost(kept)
        self._newest[entry.cache_key] = entry.id
        self._evict(now)

    def _evict(self, now: float) -> None:
        """The least recently read answers, while the storage is past a bound or they are idle
        past `max_idle` (the least recently read is first: the idle ones are a prefix)."""
        while self._newest:
            oldest = self._stored.get(next(iter(self._newest.values())))
            if (len(self._newest) <= self.max_entries and self.size_bytes <= self.max_bytes
                    and oldest is not None and now - oldest.read_at <= self.max_idle):
                return
            _, evicted = self._newest.popitem(last=False)
            self._drop(evicted)

    async def get_entries(self, key: str) -> list[Entry]:
        cache_key = key.encode()
        now = self.clock()
        self._evict(now)
        newest = self._newest.get(cache_key)
        if newest is None:
            return []
        self._newest.move_to_end(cache_key)
        kept = self._stored[newest]
        kept.read_at = now
        e = kept.entry
        # A copy each time: hishel writes into an answer's metadata when it serves it.
        return [replace(e, request=replace(e.request, metadata=dict(e.request.metadata)),
                        response=replace(e.response, stream=_once(kept.body), metadata=dict(e.response.metadata)))]

    async def update_entry(self, id: uuid.UUID, new_entry: Entry | Callable[[Entry], Entry]) -> Entry | None:
        kept = self._stored.get(id)
        if kept is None:
            return None
        updated = new_entry if isinstance(new_entry, Entry) else new_entry(kept.entry)
        if updated.id != id:
            raise ValueError("an entry's id cannot change")
        self.size_bytes -= self._cost(kept)
        kept.entry = _bodiless(updated)
        self.size_bytes += self._cost(kept)
        return updated

    async def remove_entry(self, id: uuid.UUID) -> None:
        kept = self._drop(id)
        if kept is not None and self._newest.get(kept.entry.cache_key) == id:
            del self._newest[kept.entry.cache_key]

    async def refresh_entry_ttl(self, id: uuid.UUID) -> None:
        """Answers here do not expire (every read is revalidated)."""

    async def force_close(self) -> None:
        """githubkit's cleanup of its cache strategy: forget every answer."""
        self._stored.clear()
        self._newest.clear()
        self.size_bytes = 0
