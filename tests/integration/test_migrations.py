import asyncio

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

import storage.models  # noqa: F401
from storage.database import Database
from storage.migrate import current_revision, head_revision, migrate

# Alembic cannot reflect SQLite's expression indexes (lower(repo)); test_indexes.py checks them.
pytestmark = pytest.mark.filterwarnings("ignore:autogenerate skipping metadata-specified expression-based index")


async def test_migrated_schema_matches_the_models(db):
    def diff(conn):
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return compare_metadata(ctx, SQLModel.metadata)

    async with db.engine.connect() as conn:
        assert await conn.run_sync(diff) == []
        tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
    assert {
        "pull_requests", "runs", "rounds", "escalations", "adjudications", "dependencies",
        "jobs", "webhook_deliveries", "commands", "alembic_version",
    } <= tables


async def test_rerunning_migrations_is_a_no_op(db):
    assert await current_revision(db) == head_revision()
    assert await migrate(db) == head_revision()
    assert await migrate(db) == head_revision()


async def test_concurrent_migrators_on_an_empty_database(db_url, tmp_path):
    """Several processes starting at once (CLI beside serve) must not trip over each other."""
    if db_url.startswith("sqlite"):
        db_url = f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        fresh = Database(db_url)
        async with fresh.engine.begin() as conn:
            for table in reversed(SQLModel.metadata.sorted_tables):
                await conn.exec_driver_sql(f'DROP TABLE "{table.name}"')
            await conn.exec_driver_sql("DROP TABLE alembic_version")
        await fresh.dispose()
    dbs = [Database(db_url) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(d) for d in dbs))
        assert results == [head_revision()] * 4
    finally:
        for d in dbs:
            await d.dispose()
