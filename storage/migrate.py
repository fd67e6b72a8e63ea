"""Apply the versioned migrations in migrations/ (Alembic) to a Database."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

from .database import Database

# Found, not imported: the revisions import the models (storage), and Alembic loads them itself.
_SPEC = find_spec("migrations")
assert _SPEC is not None and _SPEC.origin is not None, "the migrations package is installed with storage"
SCRIPT_LOCATION = str(Path(_SPEC.origin).parent)
# Any fixed 64-bit number: serializes concurrent migrators on one PostgreSQL database.
_PG_MIGRATION_LOCK = 0x636F6E7665726765


def _alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    return cfg


class SchemaTooNew(Exception):
    """The database's schema is a revision this code does not know: a newer release migrated it.
    One line: which revision it is at, and the way back."""

    def __init__(self, where: str, found: str, head: str) -> None:
        super().__init__(
            f"database {where} is at schema {found}, newer than this convergebot's {head}: run the "
            f"release that migrated it, or roll the schema back with that release's "
            f"`convergebot migrate --to {head}` (docs/operations.md, \"Upgrades and rollbacks\")")


def known(revision: str) -> bool:
    """Whether this code's migrations hold `revision`."""
    try:
        return ScriptDirectory.from_config(_alembic_config()).get_revision(revision) is not None
    except Exception:  # alembic's ResolutionError / CommandError: a revision it has no script of
        return False


def head_revision() -> str:
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None, "migrations/ holds the revisions"
    return head


async def migrate(db: Database, to: str = "head") -> str:
    """Bring the schema to the newest revision (or to `to`, older or newer: a rollback is
    `migrate(db, "0012")`); a no-op when it is there already. SchemaTooNew when the database is
    at a revision this code does not know.

    Safe when several processes start at once (the CLI beside `serve`): on PostgreSQL an
    advisory transaction lock serializes them, on SQLite the IMMEDIATE transaction does.
    """
    cfg = _alembic_config()
    head = head_revision()

    def _upgrade(conn: Connection) -> str:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        found = MigrationContext.configure(conn).get_current_revision()
        if found is not None and not known(found):
            raise SchemaTooNew(db.where, found, head)
        cfg.attributes["connection"] = conn
        if to == "head" or found is None or int(to) >= int(found):
            command.upgrade(cfg, to)
        else:
            command.downgrade(cfg, to)
        revision = MigrationContext.configure(conn).get_current_revision()
        assert revision is not None, "upgraded to the head revision"
        return revision

    async with db.engine.begin() as conn:
        return await conn.run_sync(_upgrade)


async def current_revision(db: Database) -> str | None:
    async with db.engine.connect() as conn:
        return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())
