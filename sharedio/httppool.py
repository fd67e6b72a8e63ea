"""How the bot's requests reach GitHub: one aiohttp connection pool under githubkit's httpx.

githubkit speaks httpx, and httpx's own transport (httpcore on anyio) spends more CPU per
request than anything else on the bot's side of a call: a cancel scope and a checkpoint per
socket operation, and before each request a look at every pooled connection's socket
(a `getpeername` and a `poll` each). `bench/http_client.py` measures it: through githubkit
with its HTTP cache, a request costs the bot about half the CPU through aiohttp's pool
(httpx-aiohttp's transport) that it costs through httpx's own. In a 200-PR run's profile the
client's share of the bot's loop fell from 28% to about 22% (BENCHMARKS.md at acb9095, "2 December, day").

Everything above the pool stays as it was: githubkit builds the request, hishel's cache
revalidates reads (`AsyncCacheTransport`, on our storage), httpx reads the answer.

githubkit builds a client of its own for each App-authenticated call (`with_auth`) and closes
it after; every such client sends through the one pool of the `open_github` it came from, so
closing one must not close the pool (`SharedPool.aclose` does nothing). The pool closes when
that `open_github` exits (`SharedPool.close`).

A proxy from the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`) is the
pool's to apply: httpx ignores the environment once it is handed a transport. It is read once,
for the API's URL (every request of a client goes there), as urllib reads it; aiohttp's own
reading (`trust_env`) reads the environment and `~/.netrc` again for every request: with it a
request cost 0.87 of the CPU it costs through httpx's transport, against 0.50 without.
"""

from __future__ import annotations

import urllib.parse
import urllib.request

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

# httpx's defaults, which the bot ran with before: at most 100 connections, an idle one kept 5 s.
MAX_CONNECTIONS = 100
KEEPALIVE_SECONDS = 5.0

# httpx-aiohttp reports every aiohttp connection error as httpx.ConnectTimeout: a refused
# connection, and a server that hung up after the request went out (a write it may have done).
# The bot treats them all as GitHub not answering, but its logs name the error, so they name
# what happened. Most specific first; a timeout keeps its mapping.
_RENAMED: tuple[tuple[type[Exception], type[httpx.TransportError] | None], ...] = (
    (aiohttp.ServerTimeoutError, None),
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),
    (aiohttp.ClientOSError, httpx.ReadError),
)


def proxy_for(url: str) -> httpx.Proxy | None:
    """The environment's proxy for `url`, None when there is none or `NO_PROXY` names its host."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    # proxy_bypass_environment: urllib's own NO_PROXY test, undocumented, so typeshed leaves it out.
    if not parts.hostname or urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
            parts.hostname, proxies):
        return None
    found = proxies.get(parts.scheme) or proxies.get("all")
    return httpx.Proxy(found) if found else None


class SharedPool(httpx.AsyncBaseTransport):
    """One aiohttp pool for every githubkit client of one `open_github`."""

    def __init__(self, api_url: str) -> None:
        # One TLS context for the pool's life, with the trust httpx would choose (certifi, or
        # SSL_CERT_FILE / SSL_CERT_DIR): loading the CA bundle costs ~25 ms of CPU.
        self._ssl = httpx.create_ssl_context()
        # The session is made on first use, inside the loop it will run on.
        self._transport = AiohttpTransport(verify=self._ssl, client=self._session,
                                           proxy=proxy_for(api_url))

    def _session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_SECONDS,
                                           ssl=self._ssl),
            # httpx keeps the cookies it is meant to; the pool keeps none of its own.
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,  # the proxy is `proxy_for`'s (see the module's docstring)
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # The cache hands the request on as a stream, which aiohttp would send chunked (a GET's
        # empty body too); read, it goes as bytes with its length, or as no body at all.
        await request.aread()
        try:
            return await self._transport.handle_async_request(request)
        except httpx.TransportError as e:
            cause = e.__cause__
            for aiohttp_error, named in _RENAMED:
                if isinstance(cause, aiohttp_error):
                    if named is not None:
                        raise named(str(cause) or type(cause).__name__, request=request) from cause
                    break
            raise

    async def aclose(self) -> None:
        """A client built on the pool closed: the pool stays open for the others."""

    async def close(self) -> None:
        """Close the pool's connections (when its `open_github` exits)."""
        await self._transport.aclose()
