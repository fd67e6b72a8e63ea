"""The HTTP cache's storage: the newest complete answer per URL, bounded."""

from __future__ import annotations

import tracemalloc

from hishel import Headers, Request, Response

from bot.github.httpcache import UNREAD, NewestAnswerStorage


async def _chunks(*parts: bytes):
    for p in parts:
        yield p


async def _store(storage: NewestAnswerStorage, key: str, *parts: bytes, read: bool = True):
    entry = await storage.create_entry(Request(method="GET", url=f"https://api/{key}"),
                                       Response(status_code=200, stream=_chunks(*parts)), key)
    if read:
        assert b"".join([c async for c in entry.response.stream]) == b"".join(parts)
    return entry


async def _body(storage: NewestAnswerStorage, key: str) -> bytes | None:
    found = await storage.get_entries(key)
    if not found:
        return None
    (entry,) = found
    return b"".join([c async for c in entry.response.stream])


async def test_an_answer_is_served_once_its_body_was_read_whole():
    storage = NewestAnswerStorage()
    await _store(storage, "a", b"half", read=False)
    assert await _body(storage, "a") is None
    await _store(storage, "a", b"{\"x\":", b" 1}")
    assert await _body(storage, "a") == b'{"x": 1}'
    assert await _body(storage, "a") == b'{"x": 1}'  # every read gets the whole body again


async def test_only_the_newest_answer_per_url_is_kept_and_removing_the_old_one_keeps_it():
    storage = NewestAnswerStorage()
    old = await _store(storage, "a", b"old")
    new = await _store(storage, "a", b"new")
    assert len(storage) == 1
    await storage.remove_entry(old.id)  # what hishel does to the answer a 200 replaced
    assert await _body(storage, "a") == b"new"
    await storage.remove_entry(new.id)
    assert await _body(storage, "a") is None


async def test_an_update_keeps_the_body_and_takes_the_new_headers():
    storage = NewestAnswerStorage()
    stored = await _store(storage, "a", b"body")
    await storage.update_entry(stored.id, lambda e: e.__class__(
        id=e.id, request=e.request, meta=e.meta, cache_key=e.cache_key,
        response=Response(status_code=200, headers={"etag": 'W/"2"'})))
    (entry,) = await storage.get_entries("a")
    assert entry.response.headers["etag"] == 'W/"2"'
    assert await _body(storage, "a") == b"body"


async def test_past_the_bound_the_least_recently_read_answer_goes():
    storage = NewestAnswerStorage(max_entries=2)
    await _store(storage, "a", b"1")
    await _store(storage, "b", b"2")
    assert await _body(storage, "a") == b"1"  # read: now b is the least recently used
    await _store(storage, "c", b"3")
    assert len(storage) == 2
    assert await _body(storage, "b") is None
    assert await _body(storage, "a") == b"1" and await _body(storage, "c") == b"3"


async def test_the_cache_keeps_within_its_bytes_dropping_the_least_recently_read_first():
    from bot.github.httpcache import PER_ANSWER

    each = 1000 + 1 + PER_ANSWER  # a body, its one-letter key, the allowance
    storage = NewestAnswerStorage(max_bytes=3 * each)
    for key in "abc":
        await _store(storage, key, b"x" * 1000)
    assert (len(storage), storage.size_bytes) == (3, 3 * each)
    assert await _body(storage, "a") is not None  # read: now the most recent
    await _store(storage, "d", b"y" * 1000)
    assert await _body(storage, "b") is None, "the least recently read answer goes first"
    assert all([await _body(storage, k) for k in "acd"])
    assert storage.size_bytes == 3 * each <= storage.max_bytes

    # A new answer for a URL replaces the old one's bytes, and a removed answer gives them back.
    await _store(storage, "a", b"z" * 10)
    assert storage.size_bytes == 2 * each + 10 + 1 + PER_ANSWER
    (entry,) = await storage.get_entries("d")
    await storage.remove_entry(entry.id)
    assert storage.size_bytes == each + 10 + 1 + PER_ANSWER and len(storage) == 2

    # An answer larger than the whole cache is not kept, and keeps nothing else out for long.
    await _store(storage, "huge", b"h" * (4 * each))
    assert (len(storage), storage.size_bytes) == (0, 0)
    await storage.force_close()
    assert storage.size_bytes == 0


# GitHub's answer headers (api.github.com, a conditional-capable GET) and a request's.
GITHUB_HEADERS = {
    "server": "github.com", "date": "Fri, 04 Dec 2026 22:00:00 GMT", "content-type": "application/json; charset=utf-8",
    "cache-control": "private, max-age=60, s-maxage=60",
    "vary": "Accept, Authorization, Cookie, X-GitHub-OTP,Accept-Encoding, Accept, X-Requested-With",
    "etag": 'W/"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"',
    "last-modified": "Fri, 04 Dec 2026 21:00:00 GMT", "x-oauth-scopes": "", "x-accepted-oauth-scopes": "",
    "x-github-media-type": "github.v3; format=json", "x-github-api-version-selected": "2022-11-28",
    "link": '<https://api.github.com/repositories/1/pulls?page=2>; rel="next"',
    "x-ratelimit-limit": "5000", "x-ratelimit-remaining": "4999", "x-ratelimit-reset": "1733350000",
    "x-ratelimit-used": "1", "x-ratelimit-resource": "core",
    "access-control-expose-headers": "ETag, Link, Location, Retry-After, X-GitHub-OTP, X-RateLimit-Limit, "
                                     "X-RateLimit-Remaining, X-RateLimit-Used, X-RateLimit-Resource, X-RateLimit-Reset, "
                                     "X-OAuth-Scopes, X-Accepted-OAuth-Scopes, X-Poll-Interval, X-GitHub-Media-Type, "
                                     "X-GitHub-SSO, X-GitHub-Request-Id, Deprecation, Sunset",
    "access-control-allow-origin": "*", "strict-transport-security": "max-age=31536000; includeSubdomains; preload",
    "x-frame-options": "deny", "x-content-type-options": "nosniff", "x-xss-protection": "0",
    "referrer-policy": "origin-when-cross-origin, strict-origin-when-cross-origin",
    "content-security-policy": "default-src 'none'", "content-encoding": "gzip",
    "x-github-request-id": "ABCD:1234:5678:9ABC:DEF01234", "content-length": "2000",
}
REQUEST_HEADERS = {"host": "api.github.com", "accept": "application/vnd.github+json", "user-agent": "GitHubKit/Python",
                   "x-github-api-version": "2022-11-28", "authorization": "token ghs_" + "x" * 36,
                   "accept-encoding": "gzip, deflate", "connection": "keep-alive"}


async def _store_github(storage: NewestAnswerStorage, key: str, body: bytes):
    entry = await storage.create_entry(
        Request(method="GET", url=f"https://api.github.com/{key}", headers=Headers(dict(REQUEST_HEADERS))),
        Response(status_code=200, headers=Headers(dict(GITHUB_HEADERS)), stream=_chunks(body)), key)
    async for _ in entry.response.stream:
        pass


async def test_an_answer_keeps_the_headers_read_back_and_the_request_headers_it_varies_on():
    storage = NewestAnswerStorage()
    await _store_github(storage, "repos/acme/app/pulls", b"[]")
    (entry,) = await storage.get_entries("repos/acme/app/pulls")
    kept = set(entry.response.headers)
    assert {"etag", "last-modified", "vary", "link", "content-type", "x-ratelimit-remaining"} <= kept
    assert not kept & UNREAD
    # What hishel matches a later request against (the token among them: another token's read
    # is not served this one's answer); nothing else of the request.
    assert set(entry.request.headers) == {"accept", "authorization", "accept-encoding"}


async def test_what_the_cache_counts_is_what_its_answers_hold_in_memory():
    """`max_bytes` binds on what the answers really cost: the count is within 1.0-1.5 times
    what tracemalloc sees them hold (GitHub's headers, a 2 KB body each)."""
    storage = NewestAnswerStorage()
    await _store_github(storage, "warm-up", b"x")  # first-use allocations out of the measure
    before = storage.size_bytes
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for i in range(500):
            await _store_github(storage, f"repos/acme/s{i}/pulls/1", b"x" * 2000)
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    counted = storage.size_bytes - before
    assert 1.0 <= counted / held <= 1.5, (counted / 500, held / 500)


async def test_an_answer_nobody_read_for_the_idle_age_goes_and_one_read_since_stays():
    now = [0.0]
    storage = NewestAnswerStorage(max_idle=600.0, clock=lambda: now[0])
    await _store(storage, "finished", b"a finished PR's answer")
    await _store(storage, "driven", b"a driven PR's answer")
    now[0] = 500.0
    assert await _body(storage, "driven") is not None  # read again: its age starts over
    now[0] = 600.0
    assert await _body(storage, "finished") is not None  # idle for exactly the age: kept
    now[0] = 1100.5
    await _store(storage, "new", b"x")
    assert len(storage) == 2 and await _body(storage, "new") == b"x"  # "finished" (read at 600) stays
    now[0] = 1200.5
    assert await _body(storage, "finished") is None  # idle 600.5 s: gone, and its bytes with it
    assert await _body(storage, "driven") is None  # read at 500: idle 700.5 s
    assert len(storage) == 1 and storage.size_bytes == NewestAnswerStorage._cost(storage._stored[
        storage._newest[b"new"]])
