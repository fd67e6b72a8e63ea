"""A schema and the code that reads it: `convergebot migrate --to REV` rolls a database back (and
forward again), and a release older than its database's schema says so in one line, for `serve`
as for every command, instead of failing on rows it cannot read."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from storage.database import Database
from storage.migrate import current_revision, head_revision

from .test_cli import cli_env
from .test_cli_errors import convergebot, one_line

pytestmark = pytest.mark.filterwarnings("ignore:autogenerate skipping metadata-specified expression-based index")


async def _indexes(db: Database) -> set[str]:
    query = ("SELECT indexname FROM pg_indexes" if db.is_postgres
             else "SELECT name FROM sqlite_master WHERE type = 'index'")
    async with db.engine.connect() as conn:
        return {row[0] for row in (await conn.execute(text(query))).all()}


async def _dependency_columns(db: Database) -> set[str]:
    query = ("SELECT column_name FROM information_schema.columns WHERE table_name = 'dependencies'"
             if db.is_postgres else "SELECT name FROM pragma_table_info('dependencies')")
    async with db.engine.connect() as conn:
        return {row[0] for row in (await conn.execute(text(query))).all()}


async def test_migrate_to_an_older_revision_rolls_back_and_migrate_comes_forward_again(db_url):
    head = head_revision()
    older = "0014"  # before 0015's index and 0016's stack columns
    env = cli_env(db_url)
    db = Database(db_url)
    try:
        code, out, err = await convergebot("migrate", "--to", older, env=env)
        assert (code, err) == (0, ""), err
        assert f"database at revision {older}" in out
        assert await current_revision(db) == older
        assert "ix_runs_ended_at" not in await _indexes(db)  # the newer schema is gone with it
        assert "fork_point" not in await _dependency_columns(db)

        code, out, err = await convergebot("migrate", env=env)
        assert code == 0 and f"database at revision {head}" in out, err
        assert "ix_runs_ended_at" in await _indexes(db)
        assert {"fork_point", "restacked_at"} <= await _dependency_columns(db)

        code, _, err = await convergebot("migrate", "--to", "9998", env=env)
        assert code == 2 and "no such schema revision" in one_line(err)
        assert await current_revision(db) == head
    finally:
        await db.dispose()


@pytest.mark.parametrize("command", [("status",), ("migrate",), ("serve",)])
async def test_a_release_older_than_the_schema_says_so_in_one_line(db_url, command):
    db = Database(db_url)
    try:
        async with db.engine.begin() as conn:  # as a newer release's migration would leave it
            await conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    finally:
        await db.dispose()
    env = cli_env(db_url)
    env["CONVERGEBOT_SERVER_PORT"] = "0"
    env["CONVERGEBOT_GITHUB_WEBHOOK_SECRET"] = "s3cret"
    code, _, err = await convergebot(*command, env=env)
    line = one_line(err)
    assert code == 1, err
    assert "is at schema 9999, newer than this convergebot's" in line and "migrate --to" in line
