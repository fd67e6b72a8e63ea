"""ScriptedFixer (kind "fake") against a real bare repository."""

from __future__ import annotations

import pytest

from bot.fixers.base import ThreadAction
from bot.fixers.scripted import ScriptedFixer
from bot.rules.model import Finding

from .test_fixer_support import FINDINGS, Remote, make_remote, make_request


@pytest.fixture
def remote(tmp_path) -> Remote:
    return make_remote(tmp_path / "remote")


def fake(script, tmp_path) -> ScriptedFixer:
    return ScriptedFixer(script, workdir_root=tmp_path / "work")


async def test_push_edits_each_finding_file_and_pushes_one_commit_on_entry_head(remote, tmp_path):
    verdict = await fake(["push"], tmp_path).run(make_request(remote))

    head = remote.head()
    assert verdict.pushed_head == head and remote.parent(head) == remote.entry_head
    assert (verdict.status, verdict.finished, verdict.push_rejected) == ("addressed", True, False)
    assert verdict.thread_actions == (
        ThreadAction("PRRT_1", "fixed", "fake fix"), ThreadAction("PRRT_2", "fixed", "fake fix"))
    assert remote.show(head, "src/app.py").endswith("convergebot fake fix: fp-1 (round 3)")
    assert remote.show(head, "src/util.py").endswith("convergebot fake fix: fp-2 (round 3)")
    assert remote.log_line(head, "%s|%an") == "convergebot: address review (round 3)|convergebot"
    assert list((tmp_path / "work").iterdir()) == []


@pytest.mark.parametrize("path", [None, "../escape.txt", "/etc/passwd", ".git/config", "src"])
async def test_push_without_a_usable_path_writes_changes_md(remote, tmp_path, path):
    finding = Finding(None, None, path, None, "general remark", "bob", "fp-body")
    verdict = await fake(["push"], tmp_path).run(make_request(remote, findings=(finding,)))

    assert verdict.pushed_head == remote.head()
    assert remote.show(verdict.pushed_head, "CHANGES.md") == (
        "convergebot fake fix: fp-body (round 3)")
    assert verdict.thread_actions == ()  # a review-body item has no thread to answer
    assert not (tmp_path / "escape.txt").exists()


async def test_push_loses_the_lease_to_a_human_push_and_overwrites_nothing(remote, tmp_path):
    human = remote.push_as_human()
    verdict = await fake(["push"], tmp_path).run(make_request(remote))

    assert verdict.push_rejected is True and verdict.pushed_head is None
    assert verdict.thread_actions == ()
    assert remote.head() == human


async def test_husk_noop_ask_decline_converged_touch_nothing(remote, tmp_path):
    fixer = fake(["husk", "noop", "ask:Which API version?", "decline", "converged",
                  "blocked:Need a DB migration?"], tmp_path)
    req = make_request(remote)
    husk, noop, ask, decline, converged, blocked = [await fixer.run(req) for _ in range(6)]

    assert (husk.finished, husk.pushed_head) == (False, None)
    assert (noop.status, noop.finished, noop.pushed_head, noop.thread_actions) == (
        "addressed", True, None, ())
    assert (ask.status, ask.question, ask.finished) == ("needs_input", "Which API version?", True)
    assert (blocked.status, blocked.question) == ("blocked", "Need a DB migration?")
    assert decline.thread_actions == (
        ThreadAction("PRRT_1", "declined", "not applicable"),
        ThreadAction("PRRT_2", "declined", "not applicable"))
    assert converged.status == "converged"
    assert remote.head() == remote.entry_head
    assert [b for _, _, b in fixer.history] == [
        "husk", "noop", "ask:Which API version?", "decline", "converged",
        "blocked:Need a DB migration?"]


async def test_each_pr_walks_its_own_script_and_repeats_the_last_step(remote, tmp_path):
    fixer = fake({"acme/widgets#7": ["husk", "noop"], "*": ["converged"]}, tmp_path)
    mine, other = make_request(remote), make_request(remote, pr_key="acme/widgets#8")

    statuses = [(await fixer.run(mine)).finished for _ in range(3)]
    assert statuses == [False, True, True]
    assert (await fixer.run(other)).status == "converged"


async def test_one_list_is_walked_per_pr(remote, tmp_path):
    fixer = fake(["husk", "noop"], tmp_path)
    a, b = make_request(remote), make_request(remote, pr_key="acme/widgets#9")
    assert (await fixer.run(a)).finished is False
    assert (await fixer.run(b)).finished is False
    assert (await fixer.run(a)).finished is True


async def test_push_twice_builds_on_the_new_head(remote, tmp_path):
    fixer = fake(["push"], tmp_path)
    first = await fixer.run(make_request(remote))
    second = await fixer.run(make_request(remote, round_no=4, entry_head=first.pushed_head))

    assert remote.head() == second.pushed_head
    assert remote.parent(second.pushed_head) == first.pushed_head


@pytest.mark.parametrize("script", [[], ["jump"], ["ask:"], ["ask:   "], [1], {"a#1": []}])
def test_a_bad_script_is_refused_up_front(script):
    with pytest.raises(ValueError):
        ScriptedFixer(script)


def test_findings_fixture_has_threads():
    assert all(f.thread_id for f in FINDINGS)
