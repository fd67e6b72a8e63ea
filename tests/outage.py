"""A database outage as a process sees it: a TCP forwarder in front of a real PostgreSQL that can
go down (its port refuses, the connections through it are cut) and come back on the same port."""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy.engine import make_url


class Outage:
    """Forwards 127.0.0.1:`port` to the server of `url`; `url_through` is `url` via the forwarder."""

    def __init__(self, url: str) -> None:
        self._target = make_url(url)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[asyncio.Task] = set()
        self.connections = 0  # connections forwarded since start

    @property
    def url_through(self) -> str:
        return self._target.set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    async def up(self) -> None:
        """Accept again, on the port it had (a fresh one the first time)."""
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        """The port refuses new connections, and every connection through it is cut."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for pair in list(self._pairs):
            pair.cancel()
        await asyncio.gather(*self._pairs, return_exceptions=True)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._pairs.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(self._target.host, self._target.port)
        except OSError:
            writer.close()
            self._pairs.discard(task)
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:
            # Cut: a reset, as when the server's host goes away, not a polite end of stream.
            for w in (writer, up_writer):
                w.transport.abort()
        finally:
            for w in (writer, up_writer):
                w.close()
            self._pairs.discard(task)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(OSError):
        writer.write_eof()
