"""A preset's guessed thread actions (the agent printed no verdict) answer their round but are
never recorded as settled: a guess must not answer the same finding raised again later."""

from __future__ import annotations

import json

from bot.fixers import ScriptedFixer
from bot.fixers.agent_wrapper import inferred
from simulator import ReviewerScript, ReviewStep

from .harness import Recording, bot_on_simulator
from .test_findings_severity import CODEX, MAGIC, codex, converge_under, replies_to, threads_by


class Guessing:
    """A real scripted fixer whose thread actions come back marked as the bot's inference, as
    a preset's do when its agent printed no verdict line (bot/fixers/command.py)."""

    def __init__(self, inner) -> None:
        self.inner, self.kind = inner, inner.kind

    async def run(self, req):
        return inferred(await self.inner.run(req))


async def test_a_guessed_decline_answers_its_thread_but_a_repeat_goes_to_the_fixer(tmp_path, db_url):
    fixer = Recording(Guessing(ScriptedFixer(["decline", "push"])))
    script = ReviewerScript(login=CODEX, delay=0.1, steps=[
        ReviewStep(threads=[codex("app/core.py", 1, *MAGIC)], body="### 💡 Codex Review"),
        ReviewStep(threads=[codex("app/core.py", 2, *MAGIC)], body="### 💡 Codex Review"),
        ReviewStep(threads=[], body="LGTM"),
    ])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer,
                                convergence={"reviewers": [CODEX], "merge": False}) as h:
        key, pr = await converge_under(h, script)

        # The guessed decline answered round 1's thread, but settled nothing: round 2's repeat
        # went to the fixer instead of being answered "Already declined" from the record.
        rounds = await h.rounds(key)
        assert rounds[0].settled is None
        assert [(r.round_no, [f.path for f in r.findings]) for r in fixer.requests][:2] == [
            (1, ["app/core.py"]), (2, ["app/core.py"])]
        first, repeat = [t for t in threads_by(h, pr.number)[CODEX] if t.path == "app/core.py"]
        (declined,) = replies_to(h, first)
        assert declined.startswith("Declined: not applicable")
        assert not any(r.startswith("Already") for r in replies_to(h, repeat))
        assert all(not json.loads(r.settled or "[]") for r in rounds)
