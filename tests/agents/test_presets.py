"""Each fixer preset with its real CLI (tests/agents/pins.toml), end to end through `serve`, the
simulator and the sandbox, the CLI's model a fake on localhost (tests/agents/fakemodel).

Skipped where `make agents` has not installed the pinned CLI (`scripts/agents.py install`).
`make agents` runs these as the invoking user and, for root, again as an unprivileged one.
"""

from __future__ import annotations

import base64
import getpass
import os
import subprocess
import time

import pytest

from .cache import program, version
from .fakemodel import Edit, Plan
from .harness import REPO, SCENARIO, report, running

PRESETS = ("claude-code", "codex", "gemini", "aider", "copilot")
FLAGGED = "calc/ops.py"
OLD = "def sub(a, b):\n    return a + b"
NEW = "def sub(a, b):\n    return a - b"
FINAL = "Fixed sub() in calc/ops.py: it returned a + b, it returns a - b now."

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _user() -> str:
    return "root" if os.geteuid() == 0 else getpass.getuser() or str(os.geteuid())


def _cli(preset: str):
    exe = program(preset)
    if exe is None:
        pytest.skip(f"{preset} {version(preset)} is not installed: run `make agents`")
    return exe


def _changed(run, base: str, head: str) -> list[str]:
    git_dir = run.sim.repo(REPO).git_dir
    out = subprocess.run(["git", "--git-dir", str(git_dir), "diff", "--name-only", base, head],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.parametrize("preset", PRESETS)
async def test_the_real_cli_fixes_the_finding_and_the_pr_merges(preset, tmp_path):
    exe = _cli(preset)
    started = time.monotonic()
    outcome = "failed"
    try:
        async with running(preset, exe, tmp_path, Plan(edit=Edit(FLAGGED, OLD, NEW), final=FINAL)) as run:
            first = (await run.github(f"repos/{REPO}/pulls/1"))["head"]["sha"]
            await run.until("the merge", run.merged, timeout=600)
            detail = await run.detail()
            head = (await run.github(f"repos/{REPO}/pulls/1"))["head"]["sha"]
            # The first attempt pushed one change, to the flagged file only.
            assert _changed(run, first, head) == [FLAGGED], run.log()
            fixed = [r for r in detail["rounds"] if r["fixer_started_at"]]
            assert [r["attempts"] for r in fixed] == [1], detail["rounds"]
            # The round's summary is the agent's final message.
            assert FINAL in (fixed[0]["summary"] or ""), fixed[0]
            assert run.model.steps().count("edit") >= 1
            main = await run.github(f"repos/{REPO}/contents/{FLAGGED}?ref=main")
            assert "return a - b" in base64.b64decode(main["content"]).decode()
        outcome = "passed"
    finally:
        report({"preset": preset, "version": version(preset), "user": _user(), "test": "fixes and merges",
                "outcome": outcome, "seconds": round(time.monotonic() - started, 1)})


# The CLIs that report a failed edit where the bot can read it (their JSON, their transcript).
REPORTS_FAILED_EDITS = ("claude-code", "codex", "gemini", "aider", "copilot")


@pytest.mark.parametrize("preset", REPORTS_FAILED_EDITS)
async def test_an_edit_the_cli_fails_to_apply_is_no_progress_with_the_cli_s_message(preset, tmp_path):
    exe = _cli(preset)
    started = time.monotonic()
    outcome = "failed"
    # Nothing like it is in the file: Gemini CLI applies an edit whose old text is only near
    # the file's (its fuzzy match), so a near miss would be applied, not failed.
    bad = Edit(FLAGGED, "def divide(x, y):\n    raise NotImplementedError(x)", NEW)
    try:
        async with running(preset, exe, tmp_path, Plan(edit=bad, final=FINAL)) as run:
            async def escalated():
                detail = await run.detail()
                return detail if detail.get("status") == "escalated" else None
            detail = await run.until("the escalation", escalated, timeout=600)
            (esc,) = [e for e in detail["escalations"] if e["status"] == "open"]
            assert esc["kind"] == "no_advance", esc
            fixed = [r for r in detail["rounds"] if r["fixer_started_at"]]
            summary = fixed[-1]["summary"] or ""
            # Not the agent's claim: what its CLI said went wrong.
            assert summary.startswith("the agent changed nothing"), summary
            assert summary in esc["question"] or summary[:200] in esc["question"]
            assert not await run.merged()

            # The check run on the PR's head says it too.
            async def shown():
                head = (await run.github(f"repos/{REPO}/pulls/1"))["head"]["sha"]
                runs = (await run.github(f"repos/{REPO}/commits/{head}/check-runs"))["check_runs"]
                return [r for r in runs if r["name"] == "convergebot"
                        and "its CLI reported" in ((r.get("output") or {}).get("summary") or "")]
            await run.until("the check run showing the CLI's message", shown, timeout=120)
        outcome = "passed"
    finally:
        report({"preset": preset, "version": version(preset), "user": _user(), "test": "failed edit",
                "outcome": outcome, "seconds": round(time.monotonic() - started, 1)})


async def test_a_run_past_its_cost_cap_pauses_once_and_no_fixer_starts_after(tmp_path):
    # Claude Code reports its cost itself; the fake model's usage makes one attempt cost more
    # than the cap (two answers of 100,000 input tokens at the model's list price, $4 a
    # million: a million would fill its context window, and it would compact and ask again).
    preset = "claude-code"
    exe = _cli(preset)
    started = time.monotonic()
    plan = Plan(edit=Edit(FLAGGED, OLD, NEW), final=FINAL, input_tokens=100_000, output_tokens=1_000)
    scenario = tmp_path / "scenario.toml"
    # Every review flags something: the second round's fixer is the one the cap stops.
    text = SCENARIO.read_text().replace(
        'body = "Copilot reviewed 1 file and generated no new comments."\nstate = "COMMENTED"',
        'body = "Copilot reviewed 1 file and generated 1 comment."\nstate = "COMMENTED"\nthreads = [\n'
        '  { path = "calc/ops.py", line = 2, body = "`add` needs a docstring." },\n]')
    scenario.write_text(text)
    outcome = "failed"
    try:
        async with running(preset, exe, tmp_path, plan, scenario=scenario,
                           fixer={"max_cost_usd_per_run": 0.5}) as run:
            async def escalated():
                detail = await run.detail()
                return detail if detail.get("status") == "escalated" else None
            detail = await run.until("the budget escalation", escalated, timeout=600)
            (esc,) = detail["escalations"]
            assert esc["kind"] == "agent_budget", esc
            assert "$" in esc["question"] and "max_cost_usd_per_run" in esc["question"], esc["question"]
            edits = run.model.steps().count("edit")
            metrics = await run.metrics()
            cost = [line for line in metrics.splitlines()
                    if line.startswith('convergebot_agent_cost_usd_total{fixer="claude-code"}')]
            assert cost and float(cost[0].split()[-1]) > 0.5, cost
            # The pause came before the second round's agent: it never ran, and the model was
            # asked for one edit, the first round's.
            second = [r for r in detail["rounds"] if r["round"] == 2]
            assert second and second[0]["summary"].startswith("the fixer did not run"), detail["rounds"]
            assert edits == 1, run.model.steps()
            outcome = "passed"
    finally:
        report({"preset": preset, "version": version(preset), "user": _user(), "test": "cost cap",
                "outcome": outcome, "seconds": round(time.monotonic() - started, 1)})
