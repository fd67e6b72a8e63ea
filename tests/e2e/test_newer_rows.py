"""Rows a newer release wrote, met by this one (a rolling deploy runs two side by side): an
effect it does not know is handed back for a replica that knows it, its attempts untouched, never
failed (the write would be lost)."""

from __future__ import annotations

from storage import jobs
from storage.models import utcnow

from .harness import REPO, bot_on_simulator, open_and_enroll, steps


async def test_an_effect_of_a_newer_release_is_handed_back_not_failed(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        h.sim.set_reviewer(REPO, steps(0))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        job_id, _ = await jobs.enqueue(h.rt.db, "effect", "fx:teleport:1", pr_key=key,
                                       payload={"effect": "teleport"})
        h.rt.wake_workers()

        async def handed_back():
            job = await jobs.get_job(h.rt.db, job_id)
            return job if job.status == "queued" and "newer release" in (job.last_error or "") else None

        job = await h.wait_for("the unknown effect handed back", handed_back)
        assert job.attempts == 0 and job.run_at > utcnow()  # no attempt spent; tried again later
