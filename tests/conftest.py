"""Fixtures: every storage test runs on a real SQLite file AND a real PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from pathlib import Path

import asyncpg
import pytest
import structlog
from sqlalchemy.engine import make_url

from storage.database import Database
from storage.migrate import migrate

from .pgcluster import Cluster
from .simulator_fixtures import api, sim, simulator, webhook_receiver  # noqa: F401  (shared fixtures)


@pytest.fixture(autouse=True)
def _logging_as_it_was():
    """Logging as it was before the test: one that runs the CLI in-process (`main([...])`) points
    structlog and the root logger at the stderr pytest captured for it, which pytest closes after
    it, and every later test of the worker would fail on its first log line."""
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.configure(**config)
    root.handlers[:] = handlers
    root.setLevel(level)

# CONVERGEBOT_TEST_REPEAT=N runs every selected test N times (scripts/stress.sh uses it to show a
# test is not flaky under load).
REPEAT = int(os.environ.get("CONVERGEBOT_TEST_REPEAT", "1"))


def pytest_generate_tests(metafunc):
    if REPEAT > 1:
        metafunc.fixturenames.append("repeat_index")
        metafunc.parametrize("repeat_index", range(REPEAT))


BACKENDS = [b.strip() for b in os.environ.get("CONVERGEBOT_TEST_BACKENDS", "sqlite,postgres").split(",")]
# One template per pytest-xdist worker: each worker starts its own cluster, but a shared server
# (CONVERGEBOT_TEST_POSTGRES_URL) must not see two workers rebuild or copy one template at once.
TEMPLATE_DB = f"convergebot_template_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


@pytest.fixture(scope="session")
def pg_admin_url():
    url = os.environ.get("CONVERGEBOT_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    cluster = Cluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _asyncpg_dsn(url: str, database: str | None = None) -> str:
    u = make_url(url).set(drivername="postgresql")
    if database:
        u = u.set(database=database)
    return u.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_template(pg_admin_url) -> str:
    async def build() -> None:
        conn = await asyncpg.connect(_asyncpg_dsn(pg_admin_url))
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}"')
            await conn.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
        finally:
            await conn.close()
        db = Database(_asyncpg_dsn(pg_admin_url, TEMPLATE_DB))
        await migrate(db)
        await db.dispose()

    asyncio.run(build())
    return TEMPLATE_DB


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"

    async def build() -> None:
        db = Database(f"sqlite:///{path}")
        await migrate(db)
        await db.dispose()

    asyncio.run(build())
    return path


@pytest.fixture
def sqlite_db_url(sqlite_template, tmp_path) -> str:
    """A freshly migrated SQLite file, for tests whose subject does not depend on the backend
    (the storage they touch is covered on both elsewhere)."""
    path = tmp_path / "convergebot.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path) -> str:
    """A URL of a freshly migrated, empty database on the parametrized backend."""
    if request.param == "sqlite":
        path = tmp_path / "convergebot.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        return f"sqlite:///{path}"
    admin = request.getfixturevalue("pg_admin_url")
    template = request.getfixturevalue("pg_template")
    name = f"t_{uuid.uuid4().hex[:16]}"

    async def create() -> None:
        conn = await asyncpg.connect(_asyncpg_dsn(admin))
        try:
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        finally:
            await conn.close()

    asyncio.run(create())
    request.addfinalizer(lambda: asyncio.run(_drop(admin, name)))
    return _asyncpg_dsn(admin, name)


async def _drop(admin: str, name: str) -> None:
    conn = await asyncpg.connect(_asyncpg_dsn(admin))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@pytest.fixture
async def db(db_url):
    database = Database(db_url)
    yield database
    await database.dispose()


@pytest.fixture
async def bare_runtime(db):
    """Makes a Runtime on `db` with no GitHub (for the poller's own tests). Its leadership's
    connection (PostgreSQL keeps one for the lock) is given back at the end, as `serve` does at
    shutdown; left to the garbage collector, SQLAlchemy warned of a connection never returned."""
    from bot.config import Config
    from bot.runtime.context import Runtime

    made = []

    def make(config: Config | None = None) -> Runtime:
        made.append(Runtime(config or Config(), db, github=None))
        return made[-1]

    yield make
    for rt in made:
        await rt.leadership.release()
