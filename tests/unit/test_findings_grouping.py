"""Findings of several reviewers about the same lines and meaning become one finding."""

import json
from dataclasses import replace
from pathlib import Path

import simulator
from bot.fixers.base import FixRequest
from bot.fixers.prompt import render_findings, render_prompt
from bot.rules.findings import (
    GROUP_SIMILARITY,
    from_threads,
    group,
    normalised,
    similarity,
    threads_of,
)
from bot.rules.model import Thread
from simulator import load_scenario

SCENARIO = Path(simulator.__file__).parent / "scenarios" / "review_bots.toml"


def scenario_threads() -> tuple[Thread, ...]:
    """Round 1 of the scenario: each bot's threads, as the bot reads them back."""
    repo = load_scenario(SCENARIO).repos[0]
    out = []
    for r in repo.reviewers:
        for n, t in enumerate(r.steps[0].threads if r.steps else ()):
            out.append(Thread(id=f"{r.login.split('[')[0]}-{n}", is_resolved=False, is_outdated=False,
                              path=t.path, line=t.line, comment_id=100 + len(out), body=t.body, author=r.login))
    return tuple(out)


def test_three_bots_on_the_same_bug_are_one_finding_with_every_thread():
    found = group(from_threads(scenario_threads()))
    mean = [f for f in found if f.path == "stats/mean.py"]
    assert len(mean) == 1
    lead = mean[0]
    assert {lead.thread_id, *(t[0] for t in lead.twins)} == {"coderabbitai-0", "gemini-code-assist-0",
                                                           "chatgpt-codex-connector-0"}
    assert lead.severity == "major"
    # Replies reach every thread of the group, each under its own author and fingerprint.
    each = threads_of(lead)
    assert [f.thread_id for f in each][0] == lead.thread_id and len(each) == 3
    assert len({f.fingerprint for f in each}) == 3 and all(not f.twins for f in each[1:])
    # Findings elsewhere stay as they were.
    assert sorted(f.path for f in found) == ["README.md", "stats/fmt.py", "stats/mean.py"]


def test_different_meaning_on_the_same_lines_is_not_grouped():
    a = Thread(id="A", is_resolved=False, is_outdated=False, path="x.py", line=10, comment_id=1,
               body="mean() divides by zero on an empty list.", author="coderabbitai[bot]")
    b = replace(a, id="B", body="Name the parameter after what it holds.", author="gemini-code-assist[bot]")
    assert similarity(a.body, b.body) < GROUP_SIMILARITY
    assert len(group(from_threads((a, b)))) == 2


def test_the_same_text_far_apart_or_in_another_file_is_not_grouped():
    a = Thread(id="A", is_resolved=False, is_outdated=False, path="x.py", line=10, comment_id=1,
               body="Guard the empty list before dividing.", author="coderabbitai[bot]")
    far = replace(a, id="B", line=40, author="gemini-code-assist[bot]")
    other = replace(a, id="C", path="y.py", author="gemini-code-assist[bot]")
    near = replace(a, id="D", line=12, author="gemini-code-assist[bot]")
    assert len(group(from_threads((a, far, other)))) == 3
    grouped = group(from_threads((a, near)))
    assert len(grouped) == 1 and grouped[0].twins[0][0] == "D"


def test_one_reviewers_two_comments_are_not_twins():
    a = Thread(id="A", is_resolved=False, is_outdated=False, path="x.py", line=10, comment_id=1,
               body="Guard the empty list before dividing.", author="coderabbitai[bot]")
    assert len(group(from_threads((a, replace(a, id="B", line=11))))) == 2


def test_the_group_takes_its_worst_severity():
    a = Thread(id="A", is_resolved=False, is_outdated=False, path="x.py", line=10, comment_id=1,
               body="nit: guard the empty list before dividing", author="alice")
    b = replace(a, id="B", author="chatgpt-codex-connector[bot]",
                body="**<sub><sub>![P0 Badge](https://img.shields.io/badge/P0-red?style=flat)</sub></sub>  "
                     "Guard the empty list before dividing**")
    (one,) = group(from_threads((a, b)))
    assert one.severity == "critical" and one.thread_id == "B" and one.twins[0][0] == "A"


def test_boilerplate_does_not_count_as_meaning():
    bare = "Guard the empty list before dividing."
    wrapped = ("_⚠️ Potential issue_ | _🟠 Major_\n\n**Guard the empty list before dividing.**\n\n"
               "<details>\n<summary>🤖 Prompt for AI Agents</summary>\n\nlots of other words here\n</details>\n\n"
               "<!-- fingerprinting:phantom:x -->")
    assert normalised(wrapped) == normalised(bare)
    assert similarity(wrapped, bare) == 1.0


def test_the_fixer_reads_a_group_once_and_the_nits_apart():
    a = Thread(id="A", is_resolved=False, is_outdated=False, path="x.py", line=10, comment_id=1,
               body="Guard the empty list before dividing.", author="coderabbitai")
    twin = replace(a, id="B", line=11, author="gemini-code-assist")
    nit = replace(a, id="C", path="y.py", body="nit: a blank line here", author="alice")
    found = group(from_threads((a, twin, nit)))
    findings = tuple(replace(f, optional=f.severity == "nit") for f in found)
    req = FixRequest(pr_key="o/r#1", round_no=1, attempt=0, title="t", description="", head_branch="b",
                     entry_head="c" * 40, clone_url="file:///x", token=None, findings=findings, instructions=())
    prompt = render_prompt(req)
    assert "## Findings (1)" in prompt and "## Optional (non-blocking) (1)" in prompt
    assert prompt.index("Guard the empty list") < prompt.index("## Optional") < prompt.index("a blank line")
    # One finding, every member's own text under it (the twin's, though alike, is read too).
    assert "- thread `B` by gemini-code-assist at `x.py:11`:" in prompt
    assert prompt.count("Guard the empty list") == 2 and prompt.count("### ") == 2
    doc = json.loads(render_findings(req))["findings"]
    assert [(f["thread_id"], f["severity"], f["optional"], f["also_threads"]) for f in doc] == [
        ("A", "major", False, ["B"]), ("C", "nit", True, [])]


def test_alike_texts_naming_different_code_are_not_grouped():
    a = Thread(id="A", is_resolved=False, is_outdated=False, path="x.py", line=10, comment_id=1,
               body="Missing type hint for parameter `values`; add a type annotation so callers know what it takes.", author="coderabbitai")
    b = replace(a, id="B", line=11, body="Missing type hint for parameter `limit`; add a type annotation so callers know what it takes.", author="gemini-code-assist")
    c = replace(a, id="C", line=12, body="Missing type hint for the `values` parameter; add a type annotation so callers know what it takes.", author="codex")
    assert similarity(a.body, b.body) >= GROUP_SIMILARITY  # the words alone would group them
    found = group(from_threads((a, b, c)))
    assert sorted((f.thread_id, tuple(t[0] for t in f.twins)) for f in found) == [("A", ("C",)), ("B", ())]
