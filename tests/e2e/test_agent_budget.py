"""The agent's budgets (docs/fixers.md, "Cost and time"): a run past its cost or time cap is
escalated once before its next fixer, an answer buys it a fresh budget, and past the hourly cap
every fixer waits the hour out instead of running."""

from __future__ import annotations

from dataclasses import replace

from sqlmodel import select

from bot.fixers import ScriptedFixer
from bot.fixers.usage import Usage
from storage import agent_attempts, jobs
from storage.models import Job, utcnow

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps


class Spending(ScriptedFixer):
    """The scripted fixer, each run reporting `usage` as an agent CLI would."""

    def __init__(self, usage: Usage, script=("push",)) -> None:
        super().__init__(list(script))
        self.usage = usage
        self.runs: list[tuple[str, int]] = []

    async def run(self, req):
        self.runs.append((req.pr_key, req.round_no))
        return replace(await super().run(req), usage=self.usage)


async def test_a_run_past_its_cost_cap_is_escalated_once_and_an_answer_buys_a_fresh_budget(tmp_path, db_url):
    fixer = Spending(Usage(input_tokens=50_000, output_tokens=2_000, cost_usd=2.0, seconds=30))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, fixer_config={"max_cost_usd_per_run": 3.0},
                                convergence={"churn_rounds": 100, "max_rounds": 100}) as h:
        h.sim.set_reviewer(REPO, steps(1))  # a new finding every review: a fixer every round
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated", timeout=60)
        await quiesce(h)
        # Two attempts ($4.00), then the third round's fixer did not start.
        assert fixer.runs == [(key, 1), (key, 2)], fixer.runs
        (esc,) = await h.escalations(key)
        assert esc.kind == "agent_budget" and esc.round_no == 3
        assert "$4.00 in 2 attempt(s)" in esc.question and "max_cost_usd_per_run = $3.00" in esc.question
        comments = [c for c in h.bot_comments(number) if "agent's budget is spent" in c["body"]]
        assert len(comments) == 1, comments
        spent = await agent_attempts.for_pr(h.rt.db, key)
        assert [(a.round_no, a.cost_usd, a.input_tokens) for a in spent] == [(1, 2.0, 50_000), (2, 2.0, 50_000)]
        detail = await h.http.get(f"/api/prs/{REPO}/{number}")
        assert detail.json()["agent"]["cost_usd"] == 4.0

        # The answer counts the spend afresh: the fixer runs again.
        await h.sim.comment(REPO, number, "/converge answer go on", user="maint")

        async def ran_again():
            return len(fixer.runs) > 2
        await h.wait_for("the fixer after the answer", ran_again, timeout=60)
        assert fixer.runs[2] == (key, 3)

        # The fresh budget is enforced too: two attempts more ($4.00 since the answer), then the
        # run is paused again before the fifth round's fixer, not never.
        async def paused_again():
            escs = await h.escalations(key)
            return escs if len(escs) == 2 and escs[1].status == "open" else None
        escs = await h.wait_for("the second pause", paused_again, timeout=60)
        assert escs[0].status == "answered" and escs[1].kind == "agent_budget" and escs[1].round_no == 5
        assert "$4.00 in 2 attempt(s)" in escs[1].question
        assert fixer.runs == [(key, 1), (key, 2), (key, 3), (key, 4)], fixer.runs


async def test_a_run_past_its_minutes_is_escalated_before_its_next_fixer(tmp_path, db_url):
    fixer = Spending(Usage(seconds=45 * 60))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, fixer_config={"max_minutes_per_run": 60},
                                convergence={"churn_rounds": 100, "max_rounds": 100}) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "escalated", timeout=60)
        await quiesce(h)
        assert len(fixer.runs) == 2  # 45 minutes, then 90: over the hour
        (esc,) = await h.escalations(key)
        assert esc.kind == "agent_budget" and "90.0 minutes" in esc.question, esc.question


async def test_past_the_hourly_cap_a_fixer_waits_the_hour_out_and_its_deadline_with_it(tmp_path, db_url):
    fixer = Spending(Usage(cost_usd=5.0, seconds=10))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, fixer_config={"max_cost_usd_per_hour": 4.0},
                                convergence={"churn_rounds": 100, "max_rounds": 100}) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, _ = await open_and_enroll(h)

        async def waiting():
            view = await h.view(key)
            return view if view and (view.pr.last_action or "").startswith("fixer waits until") else None
        view = await h.wait_for("the fixer waiting for the hour", waiting, timeout=60)
        await quiesce(h)
        assert fixer.runs == [(key, 1)]  # the second round's fixer did not run
        assert view.derived_status == "converging" and "max_cost_usd_per_hour = $4.00" in view.pr.last_action
        assert await h.escalations(key) == []  # waited out, not asked
        async with h.rt.db.read_session() as s:
            queued = list(await s.exec(select(Job).where(Job.pr_key == key, Job.status == jobs.JobStatus.QUEUED,
                                                         Job.kind.in_(("fix", "progress_check")))))
        fix = [j for j in queued if j.kind == "fix"]
        checks = [j for j in queued if j.kind == "progress_check" and j.round_no == 2]
        assert len(fix) == 1 and fix[0].round_no == 2
        # Due once the first attempt's spend leaves the hour, and the round's deadline after it.
        assert (fix[0].run_at - utcnow()).total_seconds() > 55 * 60
        assert checks and all(c.run_at > fix[0].run_at for c in checks), [(c.key, c.run_at) for c in checks]
