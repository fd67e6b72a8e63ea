"""Which database a `database.url` names: the URLs people paste (`sqlite:///x.db`,
`postgresql://…`) read into the async driver this project runs on, the errors for a URL that names
none or a database that is not there, why a first connection failed, in one line, and whether an
error says the database could not be reached at all."""

from __future__ import annotations

import sqlite3

from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
)


class UnsupportedURL(ValueError):
    """`database.url` names no backend this project runs on, or does not parse."""


class NoDatabase(LookupError):
    """No database to read: the SQLite file is not there (opened with `create=False`), or, as the
    read-only commands say it, the schema is not."""


class DatabaseUnreachable(Exception):
    """The configured database refused or did not answer the first connection (`where` names it
    without its password): one line, exit 1."""

    def __init__(self, where: str, e: BaseException) -> None:
        super().__init__(f"database {where}: cannot connect: {connect_failure(e)}")


def normalize_url(url: str) -> str:
    """Accept the URLs people paste (`sqlite:///x.db`, `postgresql://…`) and pick the async driver."""
    try:
        u = make_url(url)
    except ArgumentError:
        raise UnsupportedURL(f"database.url: cannot parse {url!r} (e.g. sqlite:///convergebot.db)") from None
    if u.get_backend_name() == "sqlite":
        return u.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    if u.get_backend_name() == "postgresql":
        return u.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
    raise UnsupportedURL(f"database.url: unsupported backend {u.get_backend_name()!r} (use sqlite or postgresql)")


def connect_failure(e: BaseException) -> str:
    """Why a first connection failed, in one line: the driver's own message without the
    statement and the link SQLAlchemy appends."""
    cause = getattr(e, "orig", None) or e
    text_ = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    if text_.startswith("<class '") and ">: " in text_:  # asyncpg through SQLAlchemy's adapter
        text_ = text_.split(">: ", 1)[1]
    return text_


def unreachable(e: BaseException) -> bool:
    """Whether `e` says the database was not there to ask (refused, unresolvable, cut off, shutting
    down, a SQLite file locked or unreadable) rather than refusing what it was asked: a statement's
    mistake is a bug to show in full, an outage is a state to report once."""
    if isinstance(e, DBAPIError):
        return e.connection_invalidated or isinstance(e, (OperationalError, InterfaceError))
    return isinstance(e, (OSError, DisconnectionError, sqlite3.OperationalError, sqlite3.InterfaceError))
