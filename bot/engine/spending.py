"""The agent's budgets: what a run's agent may spend, and all agents together in an hour.

A loop of agent runs costs money, not only GitHub requests: a run past
`[fixer] max_cost_usd_per_run` or `max_minutes_per_run` is escalated naming the figure before
its next fixer starts, and a maintainer's answer buys it a fresh budget (its spend is then
counted from the answer). Past `max_cost_usd_per_hour`, counted over every PR, each fixer waits
until the last hour's spend falls under the cap: the fix job comes back then, and the round's
deadline check is put off with it (docs/fixers.md, "Cost and time").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import func, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot import metrics
from bot.engine.dispatch import DEADLINE_MARGIN
from bot.fixers.base import FixRequest, Verdict
from bot.runtime.context import Runtime
from storage import agent_attempts
from storage.jobs import JobStatus
from storage.keys import PrKey, ProcessKey
from storage.models import AgentAttempt, Escalation, Job, utcnow
from storage.statuses import JobKind

log = structlog.get_logger(__name__)

AGENT_BUDGET = "agent_budget"
HOUR = timedelta(hours=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Over:
    budget: str  # run_cost | run_minutes | hour_cost
    why: str  # the figure and its cap, for the escalation and the PR's last action
    until: datetime | None = None  # hour_cost: when the hour's spend next falls


def _usd(x: float) -> str:
    return f"${x:,.2f}"


async def over_budget(rt: Runtime, pr_key: PrKey, process_key: ProcessKey) -> Over | None:
    """The budget a fixer starting now for this run would break, or None."""
    cfg = rt.config.fixer
    if cfg.max_cost_usd_per_run or cfg.max_minutes_per_run:
        spent = await agent_attempts.of_run(rt.db, pr_key, process_key, await _fresh_since(rt, pr_key, process_key))
        if cfg.max_cost_usd_per_run and spent.cost_usd >= cfg.max_cost_usd_per_run:
            return Over("run_cost", f"the agent has spent {_usd(spent.cost_usd)} in {spent.attempts} "
                        f"attempt(s) of this run (fixer.max_cost_usd_per_run = {_usd(cfg.max_cost_usd_per_run)})")
        minutes = spent.seconds / 60
        if cfg.max_minutes_per_run and minutes >= cfg.max_minutes_per_run:
            return Over("run_minutes", f"the agent has run {minutes:.1f} minutes in {spent.attempts} "
                        f"attempt(s) of this run (fixer.max_minutes_per_run = {cfg.max_minutes_per_run:g})")
    if cfg.max_cost_usd_per_hour:
        start = utcnow() - HOUR
        hour = await agent_attempts.since(rt.db, start)
        if hour.cost_usd >= cfg.max_cost_usd_per_hour:
            oldest = await agent_attempts.oldest_since(rt.db, start)
            return Over("hour_cost", f"agents have spent {_usd(hour.cost_usd)} across all PRs in the last "
                        f"hour (fixer.max_cost_usd_per_hour = {_usd(cfg.max_cost_usd_per_hour)})",
                        until=(oldest or utcnow()) + HOUR)
    return None


async def _fresh_since(rt: Runtime, pr_key: PrKey, process_key: ProcessKey) -> datetime:
    """Where the run's spend is counted from: its start, or a maintainer's latest answer to its
    budget escalation (an answer buys a fresh budget)."""
    async with rt.db.read_session() as s:
        answered = (await s.exec(select(func.max(Escalation.answered_at)).where(
            Escalation.pr_key == pr_key, Escalation.process_key == process_key,
            Escalation.kind == AGENT_BUDGET, col(Escalation.answered_at).is_not(None)))).one()
    return answered or _EPOCH


def question(over: Over) -> str:
    return (f"convergebot paused this run before its next fixer attempt: {over.why}. "
            "Answer to resume with a fresh budget, or stop it with `/converge stop`.")


async def put_off_deadline(session: AsyncSession, rt: Runtime, pr_key: PrKey, process_key: ProcessKey,
                           round_no: int, until: datetime) -> None:
    """In the caller's transaction: the round's deadline check waits for the fixer that waits
    for the hour's budget, so the round is not called a husk before its agent ever ran."""
    await session.exec(update(Job).where(
        col(Job.kind) == JobKind.PROGRESS_CHECK, col(Job.pr_key) == pr_key, col(Job.process_key) == process_key,
        col(Job.round_no) == round_no, col(Job.status) == JobStatus.QUEUED,
    ).values(run_at=until + timedelta(seconds=rt.config.fixer.timeout_seconds) + DEADLINE_MARGIN))


async def record(rt: Runtime, req: FixRequest, process_key: ProcessKey, verdict: Verdict) -> None:
    """The attempt's spend, in a transaction of its own: written whether or not its verdict
    wins its fence, since the money was spent either way."""
    usage = verdict.usage
    if usage is None:
        return
    cfg = rt.config.fixer
    usage = usage.priced(cfg.usd_per_million_input_tokens, cfg.usd_per_million_output_tokens)
    fixer = cfg.preset or cfg.kind
    await agent_attempts.record(rt.db, AgentAttempt(
        pr_key=req.pr_key, process_key=process_key, round_no=req.round_no, attempt=req.attempt,
        fixer=fixer, finished_at=utcnow(), seconds=round(usage.seconds, 3),
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, turns=usage.turns,
        cost_usd=usage.cost_usd, failure=verdict.failure))
    if usage.cost_usd:
        metrics.AGENT_COST.labels(fixer).inc(usage.cost_usd)
    metrics.AGENT_TOKENS.labels(fixer, "input").inc(usage.input_tokens)
    metrics.AGENT_TOKENS.labels(fixer, "output").inc(usage.output_tokens)
    metrics.AGENT_SECONDS.labels(fixer).observe(usage.seconds)
    if verdict.failure:
        metrics.AGENT_FAILURES.labels(fixer).inc()
    log.info("fixer.spent", pr_key=req.pr_key, round=req.round_no, attempt=req.attempt, fixer=fixer,
             # Counts of tokens, not tokens: named so the log's secret filter (any key holding
             # "token") leaves them be.
             cost_usd=usage.cost_usd, input=usage.input_tokens, output=usage.output_tokens,
             turns=usage.turns, seconds=round(usage.seconds, 1))
