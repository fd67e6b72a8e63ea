"""The HTTP cache's storage: the newest complete answer per URL, bounded."""

from __future__ import annotations

from hishel import Request, Response

from bot.github.httpcache import NewestAnswerStorage


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
