"""A failed job's text, as the unauthenticated API and PR page show it: its kind and a short
message, never a path of the machine, a token or a credentialed URL; the log keeps the whole text
with its secrets hidden. A fixer run's failure, its round's summary, is shown scrubbed alike."""

from __future__ import annotations

from structlog.testing import capture_logs

from bot.fixers.git import GitError
from bot.runtime.workers import PoolSettings, WorkerPool
from storage import jobs, rounds

from ..helpers import enroll
from ..serving import make_config, serving

KEY = "acme/widgets#3"
TOKEN = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
CLONE = "/var/lib/convergebot/work/acme-widgets-3/clone"
FAILURE = (f"git push failed: fatal: unable to access 'https://x-access-token:{TOKEN}@github.com/acme/widgets.git/': "
           f"The requested URL returned error: 403 (in {CLONE}, with Authorization: Bearer {TOKEN})")


async def test_a_failed_jobs_path_token_and_credentialed_url_are_shown_to_no_one(db):
    pk = await enroll(db, KEY)
    async with db.session() as s:  # a fixer run that never finished: its summary is the failure
        await rounds.start(s, KEY, pk, 1, "a" * 40)
        await rounds.update_round(s, KEY, pk, 1, {"verdict": "addressed", "summary": FAILURE})
    job_id, _ = await jobs.enqueue(db, "probe", "probe:1", pr_key=KEY, max_attempts=1)

    async def push(job):
        raise GitError(FAILURE)

    with capture_logs() as logs:
        assert await WorkerPool(db, {"probe": push}, PoolSettings(workers=1)).run_one()
    stored = (await jobs.get_job(db, job_id)).last_error
    assert stored == f"bot.fixers.git.GitError: {FAILURE}"  # the row keeps the whole text
    (line,) = [line for line in logs if line["event"] == "job.error"]
    assert CLONE in line["error"] and "github.com/acme/widgets.git" in line["error"]

    async with serving(make_config(db.url, jobs={"workers": 1, "idle_poll_seconds": 3600})) as (_, http):
        detail = await http.get(f"/api/prs/{KEY.replace('#', '/')}")
        page = await http.get(f"/prs/{KEY.replace('#', '/')}")
    assert detail.status_code == 200 and page.status_code == 200
    (job,) = [j for j in detail.json()["jobs"] if j["id"] == job_id]
    assert job["last_error"] == ("GitError: git push failed: fatal: unable to access "
                                 "'https://github.com/acme/widgets.git/': The requested URL returned error: 403 "
                                 "(in <path>, with Authorization: Bearer ***)")
    for shown in (detail.text, page.text):
        assert TOKEN not in shown and "x-access-token" not in shown and "/var/lib/convergebot" not in shown
    assert "GitError: git push failed" in page.text and "bot.fixers.git" not in page.text
    (shown_round,) = detail.json()["rounds"]
    assert shown_round["summary"] == ("git push failed: fatal: unable to access 'https://github.com/acme/widgets.git/': "
                                      "The requested URL returned error: 403 (in <path>, with Authorization: Bearer ***)")
