"""The bot's requests on the wire (sharedio/httppool.py): one aiohttp pool under githubkit.

A plain asyncio HTTP/1.1 server on localhost records what arrives, per connection, so the tests
see what GitHub would: the bodies and headers sent, the connections kept or closed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
from dataclasses import dataclass, field

import pytest

from bot.github.client import GitHubClient, open_github
from bot.github.errors import Unavailable

ETAG = 'W/"one"'
# What the bot reads of a PR (bot/github/shapes.py `Pull`): every answer of this wire is one.
PULL = {"number": 1, "state": "open", "title": "t", "html_url": "https://github.com/acme/lib/pull/1",
        "updated_at": "2026-01-01T00:00:00Z", "head": {"ref": "feat", "sha": "a" * 40},
        "base": {"ref": "main", "sha": "b" * 40}}


@dataclass
class Seen:
    connection: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """What arrived, and which connections the client closed."""

    requests: list[Seen] = field(default_factory=list)
    closed: set[int] = field(default_factory=set)
    hang_up: bool = False  # read each request, then close without answering


async def _serve(recorder: Recorder, ids: itertools.count, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    connection = next(ids)
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            method, path, _ = line.decode().split(" ", 2)
            headers: dict[str, str] = {}
            while (header := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = header.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            body = b""
            if "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            elif headers.get("transfer-encoding") == "chunked":
                while (size := int((await reader.readline()).strip(), 16)) > 0:
                    body += await reader.readexactly(size)
                    await reader.readline()
                await reader.readline()
            recorder.requests.append(Seen(connection, method, path, headers, body))
            if recorder.hang_up:
                break
            common = f"ETag: {ETAG}\r\nX-RateLimit-Limit: 5000\r\nX-RateLimit-Remaining: 4999\r\n"
            if headers.get("if-none-match") == ETAG:
                writer.write(f"HTTP/1.1 304 Not Modified\r\n{common}\r\n".encode())
            else:
                answer = json.dumps({"seen": method, **PULL}).encode()
                writer.write(f"HTTP/1.1 200 OK\r\n{common}Content-Type: application/json\r\n"
                             f"Content-Length: {len(answer)}\r\n\r\n".encode() + answer)
            await writer.drain()
    finally:
        recorder.closed.add(connection)
        writer.close()


@pytest.fixture
async def wire():
    recorder, ids = Recorder(), itertools.count()
    server = await asyncio.start_server(lambda r, w: _serve(recorder, ids, r, w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield recorder, f"http://127.0.0.1:{port}/"


async def _until(condition, what: str, deadline: float = 10.0) -> None:
    try:
        async with asyncio.timeout(deadline):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not within {deadline:g} s: {what}") from None


async def test_reads_and_writes_keep_one_connection_and_send_their_bodies_as_github_expects(wire):
    recorder, url = wire
    async with open_github(api_url=url, token="t") as gh:
        client = GitHubClient(gh)
        assert (await client.pull("acme", "lib", 1))["number"] == 1
        # The second read is conditional; its 304 is answered from the cache.
        assert (await client.pull("acme", "lib", 1))["number"] == 1
        await client.update_check_run("acme", "lib", 7, status="completed", conclusion="success")
        first, again, patch = recorder.requests
        assert {first.connection, again.connection, patch.connection} == {first.connection}
        # A read carries no body: neither a length nor a chunked empty one.
        for read in (first, again):
            assert read.method == "GET" and read.body == b""
            assert "transfer-encoding" not in read.headers and "content-length" not in read.headers
        assert again.headers["if-none-match"] == ETAG
        assert patch.method == "PATCH" and patch.path == "/repos/acme/lib/check-runs/7"
        assert "transfer-encoding" not in patch.headers
        assert int(patch.headers["content-length"]) == len(patch.body)
        assert json.loads(patch.body) == {"status": "completed", "conclusion": "success"}
        assert patch.headers["authorization"] == "token t"
        assert "cookie" not in patch.headers
        assert not recorder.closed
    # Leaving open_github closes the pool's connections.
    await _until(lambda: first.connection in recorder.closed, "the connection closed")


async def test_a_client_that_closes_leaves_the_pool_open_for_the_others(wire):
    """githubkit closes the client it builds for each App-authenticated call (`with_auth`); the
    requests after it still go through the same pool and connection."""
    recorder, url = wire
    async with open_github(api_url=url, token="t") as gh:
        client = GitHubClient(gh)
        await client.pull("acme", "lib", 1)
        async with gh.with_auth(gh.auth) as other:
            await other.arequest("GET", "/repos/acme/lib/pulls/2")
        await client.pull("acme", "lib", 3)
        assert [r.path for r in recorder.requests] == [f"/repos/acme/lib/pulls/{n}" for n in (1, 2, 3)]
        assert recorder.requests[2].connection == recorder.requests[0].connection


async def test_a_connection_closed_without_an_answer_is_unavailable_and_named_so(wire):
    """GitHub not answering, whatever the way; the log names the way (httpx-aiohttp would call
    both of these a connect timeout)."""
    recorder, url = wire
    recorder.hang_up = True
    async with open_github(api_url=url, token="t") as gh:
        with pytest.raises(Unavailable, match="RemoteProtocolError"):
            await GitHubClient(gh).update_check_run("acme", "lib", 7, status="completed")
    assert [r.method for r in recorder.requests] == ["PATCH"]  # a write is never sent twice

    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    listening.close()  # nothing listens there now
    async with open_github(api_url=f"http://127.0.0.1:{port}/", token="t") as gh:
        with pytest.raises(Unavailable, match="ConnectError"):
            await GitHubClient(gh).pull("acme", "lib", 1)


async def test_a_proxy_from_the_environment_still_carries_the_requests(wire, monkeypatch):
    """The pool applies HTTP(S)_PROXY (httpx ignores the environment once handed a transport)."""
    recorder, proxy = wire
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    async with open_github(api_url="http://github.test/", token="t") as gh:
        assert (await GitHubClient(gh).pull("acme", "lib", 1))["number"] == 1
    (sent,) = recorder.requests
    assert sent.path == "http://github.test/repos/acme/lib/pulls/1"  # the proxy's absolute form

    # A host NO_PROXY names goes direct (here: the recorder itself, the proxy left unreachable).
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with open_github(api_url=proxy, token="t") as gh:
        assert (await GitHubClient(gh).pull("acme", "lib", 2))["number"] == 1
    assert recorder.requests[1].path == "/repos/acme/lib/pulls/2"
