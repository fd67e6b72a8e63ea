"""Who may command the bot, against the simulator: a command that changes the run reads its
author's permission fresh, so a writer revoked a moment ago is refused; `status` is answered
from the cached permission. What each costs is counted at the simulator."""

from __future__ import annotations

from sqlmodel import select

from storage.models import Command

from ..e2e.harness import REPO, bot_on_simulator, open_and_enroll, steps
from ..helpers import until

PERMISSION = "/repos/{owner}/{repo}/collaborators/{username}/permission"


async def _command(h, number: int, body: str) -> tuple[Command, dict[int, int]]:
    """Post `body` as maint, wait until the bot settled it; its row and the permission reads it
    cost, by status."""
    h.sim.counters.reset()
    comment = await h.sim.comment(REPO, number, body, user="maint")

    async def settled():
        async with h.rt.db.session() as s:
            row = (await s.exec(select(Command).where(Command.comment_id == comment.id))).first()
        return row if row is not None and row.why != "received" else None

    row = await until(f"{body!r} settled", settled)
    reads = {status: n for status in (200, 304) if (n := h.sim.counters.get(route=PERMISSION, status=status))}
    return row, reads


async def test_a_writer_whose_permission_is_revoked_is_refused_at_once(tmp_path, sqlite_db_url):
    async with bot_on_simulator(tmp_path, sqlite_db_url) as h:
        h.sim.set_reviewer(REPO, steps(0, delay=120))  # the run waits for its review all along
        key, number = await open_and_enroll(h)  # maint's `/converge`: the permission is read
        await h.wait_status(key, "waiting_review")

        # A command that changes the run asks GitHub again: unchanged, a free 304.
        forget, reads = await _command(h, number, "/converge forget")
        assert forget.accepted and reads == {304: 1}
        # `status` changes nothing: the cached permission answers it, no request.
        status, reads = await _command(h, number, "/converge status")
        assert status.accepted and reads == {}

        # Revoked well within the cache's minute: the next `stop` is refused all the same.
        await h.sim.set_permission(REPO, "maint", "read")
        stop, reads = await _command(h, number, "/converge stop")
        assert not stop.accepted and "write access" in stop.why and reads == {200: 1}
        assert (await h.view(key)).derived_status == "waiting_review"
