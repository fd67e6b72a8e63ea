"""What the prompt and the findings file ask on a conflict round and a CI round."""

from __future__ import annotations

import json

from bot.fixers.base import FixRequest
from bot.fixers.prompt import render_findings, render_prompt
from bot.fixers.workspace import commit_message
from bot.rules.model import Finding

CONFLICT = (Finding(None, None, "src/app.py", None, "src/app.py changed on both sides", None,
                    "conflict:src/app.py"),)
FAILING = (Finding(None, None, None, None, "check `tests` failed: 2 errors", None, "ci:tests"),)


def request(**overrides) -> FixRequest:
    fields = dict(pr_key="acme/widgets#42", round_no=5, attempt=0, title="Speed up parser",
                  description="", head_branch="perf/parser", entry_head="c" * 40,
                  clone_url="https://github.com/acme/widgets.git", token=None,
                  findings=CONFLICT, instructions=(), kind="conflict", base_branch="main")
    fields.update(overrides)
    return FixRequest(**fields)


def test_a_conflict_round_asks_for_a_merge_of_origin_base_not_a_rebase():
    prompt = render_prompt(request())
    assert prompt.startswith("# Resolve the conflicts of acme/widgets#42 (round 5)")
    assert "`origin/main`" in prompt and "`git merge origin/main`" in prompt
    assert "not by rebasing" in prompt and f"`{'c' * 40}`" in prompt
    assert "## Conflicting files (1)" in prompt and "### 1. `src/app.py`\n" in prompt
    assert "review body" not in prompt  # a conflict is no review item


def test_a_conflict_round_without_a_base_name_still_asks_for_a_merge():
    prompt = render_prompt(request(base_branch=None))
    assert "merging it, not by rebasing" in prompt and "origin/" not in prompt


def test_a_ci_round_asks_for_the_named_checks_to_pass_without_weakening_them():
    prompt = render_prompt(request(kind="ci", findings=FAILING))
    assert prompt.startswith("# Make the failing checks pass on acme/widgets#42 (round 5)")
    assert "## Failing checks (1)" in prompt and "check `tests` failed: 2 errors" in prompt
    assert "do not skip, weaken or delete a check" in prompt
    assert "git merge" not in prompt


def test_the_findings_file_says_what_the_round_asks():
    doc = json.loads(render_findings(request()))
    assert (doc["kind"], doc["base_branch"]) == ("conflict", "main")
    assert doc["findings"][0]["path"] == "src/app.py"
    review = json.loads(render_findings(request(kind="review", base_branch=None)))
    assert (review["kind"], review["base_branch"]) == ("review", None)


def test_the_commit_message_names_the_rounds_kind():
    assert commit_message(request()) == (
        "convergebot: resolve conflicts with the base branch (round 5)")
    assert commit_message(request(kind="ci")) == "convergebot: fix failing checks (round 5)"
    assert commit_message(request(kind="review")) == "convergebot: address review (round 5)"
