"""Findings with a severity, a history and twins, against the simulator playing three review bots
(CodeRabbit, Gemini Code Assist, Codex) in their own comment formats, and a person.

The bots' comments come from the simulator's `review_bots` scenario, so what the bot reads here
is what the scenario serves: CodeRabbit's badge line, Gemini's priority image, Codex's P-badge.
"""

from __future__ import annotations

import json
from pathlib import Path

import simulator
from bot.fixers import ScriptedFixer
from simulator import ReviewerScript, ReviewStep, ThreadSpec, load_scenario

from .harness import REPO, Recording, bot_on_simulator, quiesce

SCENARIO = Path(simulator.__file__).parent / "scenarios" / "review_bots.toml"
CODERABBIT, GEMINI, CODEX = "coderabbitai[bot]", "gemini-code-assist[bot]", "chatgpt-codex-connector[bot]"
PERSON = "alice"


def scenario():
    return load_scenario(SCENARIO).repos[0]


def threads_by(h, number: int) -> dict[str, list]:
    """The PR's review threads on the simulator, by the login that opened them, oldest first."""
    out: dict[str, list] = {}
    for t in sorted(h.sim.state.threads.values(), key=lambda t: t.id):
        if t.repo == REPO and t.number == number:
            first = h.sim.state.review_comments[t.comment_ids[0]]
            out.setdefault(first.user, []).append(t)
    return out


def replies_to(h, thread) -> list[str]:
    first = thread.comment_ids[0]
    return [e["body"] for e in h.sim.effects("review_reply") if e["in_reply_to"] == first]


async def open_stats_pr(h) -> tuple[str, int]:
    repo = scenario()
    for script in repo.reviewers:
        h.sim.set_reviewer(REPO, script)
    (spec,) = repo.pulls
    pr = await h.sim.open_pr(REPO, title=spec.title, head=spec.head, author="dev",
                             files={**repo.files, **spec.files})
    await h.sim.comment(REPO, pr.number, "/converge", user="maint")
    return f"{REPO}#{pr.number}", pr.number


async def test_three_bots_and_a_person_converge_with_only_nits_left_and_twins_fixed_once(tmp_path, db_url):
    fixer = Recording(ScriptedFixer(["push"]))
    # Each bot asked by its trigger comment, the person by a review request; all four waited for.
    reviewers = [{"login": r.login, "kind": "comment", "trigger": r.trigger}
                 for r in scenario().reviewers if r.trigger] + [{"login": PERSON, "kind": "request"}]
    assert len(reviewers) == 4
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, collaborators={
            "maint": "write", PERSON: "write"},
            convergence={"reviewer": reviewers, "block_on": "major", "merge": False}) as h:
        key, number = await open_stats_pr(h)
        view = await h.wait_status(key, "converged", timeout=60)
        await quiesce(h)

        # Each bot was asked by its own trigger comment, once a round.
        posted = [c.get("body") or "" for c in h.bot_comments(number)]
        for trigger in ("@coderabbitai review", "/gemini review", "@codex review"):
            assert sum(trigger in body for body in posted) == 2, (trigger, posted)

        # (2) The empty-list bug all three bots flagged reached the fixer once, as one finding
        # naming the other two threads; the person's change request is a finding of its own; the
        # nits went along as optional.
        (request,) = fixer.requests
        got = [(f.path, f.severity, f.optional, len(f.twins)) for f in request.findings]
        assert sorted(got, key=str) == sorted([
            ("stats/mean.py", "major", False, 2),
            (None, "major", False, 0),  # alice's CHANGES_REQUESTED body
            ("stats/fmt.py", "nit", True, 0),
            ("README.md", "nit", True, 0),
        ], key=str)
        person = next(f for f in request.findings if f.path is None)
        assert person.author == PERSON and "docstring" in person.body

        # Every thread of the group got the fixer's answer and was resolved.
        by = threads_by(h, number)
        mean_threads = [t for login in (CODERABBIT, GEMINI, CODEX) for t in by[login] if t.path == "stats/mean.py"]
        assert len(mean_threads) == 3
        for t in mean_threads:
            (reply,) = replies_to(h, t)
            assert reply.startswith("Fixed in ")
            assert h.sim.state.threads[t.id].resolved_by

        # (1) Round 2 left only nits: the PR converged on them with block_on = "major".
        rounds = await h.rounds(key)
        assert [(r.round_no, r.status) for r in rounds] == [(1, "addressed"), (2, "converged")]
        left = json.loads(rounds[1].findings)
        assert sorted((f["path"], f["severity"], f["optional"], f["author"]) for f in left) == sorted([
            ("stats/fmt.py", "nit", True, "chatgpt-codex-connector"),  # GraphQL drops "[bot]"
            # The two nits fixed in round 1 and raised again: a repeat of a fix is evidence it did
            # not fix, so it is a finding again (only a decline is answered from the record).
            ("stats/fmt.py", "nit", True, "coderabbitai"),
            ("README.md", "nit", True, "gemini-code-assist"),
        ])
        assert view.pr.converged_head == rounds[1].exit_head
        for login, path in ((CODERABBIT, "stats/fmt.py"), (GEMINI, "README.md")):
            again = [t for t in by[login] if t.path == path][-1]
            assert not any(r.startswith("Already") for r in replies_to(h, again))

        # The non-blocking nits are on the check run, apart from the findings left (none).
        async def ours():
            runs = [r for r in await h.rt.github.check_runs("acme", "app", view.pr.converged_head)
                    if r["name"] == "convergebot" and r["status"] == "completed"]
            return runs[0] if runs else None

        run = await h.wait_for("the converged check run", ours)
        summary = run["output"]["summary"]
        assert "**Findings left:** 0" in summary
        assert "Non-blocking findings (3)" in summary
        assert "nit · stats/fmt.py:1 by chatgpt-codex-connector: name the parameter after what it holds" in summary
        assert "3 non-blocking" in run["output"]["title"]


def codex(path: str, line: int, title: str, text: str) -> ThreadSpec:
    return ThreadSpec(path=path, line=line, body=(
        f"**<sub><sub>![P1 Badge](https://img.shields.io/badge/P1-orange?style=flat)</sub></sub>  {title}**"
        f"\n\n{text}\n\nUseful? React with 👍 / 👎."))


MAGIC = ("Name the magic number", "`f()` returns a bare literal; give it a name so callers know what it means.")
GLOBAL = ("Avoid a mutable module global", "`X` is rebound at import time; make it a constant.")



async def converge_under(h, script: ReviewerScript):
    """A PR under `script`, enrolled by /converge, run until converged and quiet: its key and PR."""
    h.sim.set_reviewer(REPO, script)
    pr = await h.sim.open_pr(REPO, title="Tidy", head="tidy", author="dev",
                             files={"app/core.py": "def f():\n    return 2\n"})
    key = f"{REPO}#{pr.number}"
    await h.sim.comment(REPO, pr.number, "/converge", user="maint")
    await h.wait_status(key, "converged", timeout=60)
    await quiesce(h)
    return key, pr

async def test_a_finding_declined_in_round_1_and_repeated_in_round_3_is_answered_from_the_record(tmp_path, db_url):
    fixer = Recording(ScriptedFixer(["decline", "push"]))
    script = ReviewerScript(login=CODEX, delay=0.1, steps=[
        ReviewStep(threads=[codex("app/core.py", 1, *MAGIC)], body="### 💡 Codex Review"),
        ReviewStep(threads=[codex("app/util.py", 1, *GLOBAL)], body="### 💡 Codex Review"),
        # Round 3 raises the declined one again, on another line.
        ReviewStep(threads=[codex("app/core.py", 2, *MAGIC)], body="### 💡 Codex Review"),
    ])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer,
                                convergence={"reviewers": [CODEX], "merge": False}) as h:
        key, pr = await converge_under(h, script)

        # The fixer ran in rounds 1 and 2 only; round 3's repeat never reached it.
        assert [(r.round_no, [f.path for f in r.findings]) for r in fixer.requests] == [
            (1, ["app/core.py"]), (2, ["app/util.py"])]
        rounds = await h.rounds(key)
        assert [(r.round_no, r.status) for r in rounds] == [(1, "addressed"), (2, "addressed"), (3, "converged")]

        first, repeat = [t for t in threads_by(h, pr.number)[CODEX] if t.path == "app/core.py"]
        (declined,) = replies_to(h, first)
        assert declined.startswith("Declined: not applicable")
        (answer,) = replies_to(h, repeat)
        link = f"/pull/{pr.number}#discussion_r{first.comment_ids[0]}"
        assert answer.startswith("Already declined in round 1 (not applicable): ") and link in answer
        assert h.sim.state.threads[repeat.id].resolved_by
