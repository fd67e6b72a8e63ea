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
