"""Named cursors survive a new Database (a restart) and are replaced, not duplicated."""

from __future__ import annotations

from storage import cursors
from storage.database import Database


async def test_a_cursor_is_replaced_and_read_back_after_a_restart(db_url):
    db = Database(db_url)
    await cursors.save(db, {"scan:o/r:comments": "2026-01-01T00:00:00Z", "hooks": "41"})
    await cursors.save(db, {"hooks": "42"})
    await db.dispose()

    again = Database(db_url)
    try:
        assert await cursors.load(again) == {"scan:o/r:comments": "2026-01-01T00:00:00Z", "hooks": "42"}
        assert await cursors.load(again, "scan:") == {"scan:o/r:comments": "2026-01-01T00:00:00Z"}
    finally:
        await again.dispose()
