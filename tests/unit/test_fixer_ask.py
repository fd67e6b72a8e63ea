"""Mention and author fixers: a comment to post, no I/O."""

from __future__ import annotations

from bot.fixers.ask import AuthorFixer, MentionFixer
from bot.fixers.base import FixRequest
from bot.rules.model import Finding

FINDINGS = (
    Finding("PRRT_a", 11, "src/app.py", 12, "Off-by-one in the loop bound.", "copilot", "fp-a"),
    Finding(None, None, None, None, "Add a changelog entry.", "bob", "fp-c"),
)


def request(**overrides) -> FixRequest:
    fields = dict(
        pr_key="acme/widgets#42", round_no=2, attempt=0, title="t", description="d",
        head_branch="perf/parser", entry_head="c" * 40, clone_url="https://github.com/a/b.git",
        token="ghs_never_in_a_comment", findings=FINDINGS,
        instructions=("@carol answered: keep the Python 3.11 floor",),
    )
    fields.update(overrides)
    return FixRequest(**fields)


async def test_mention_asks_the_agent_to_push_with_every_finding_and_answer():
    verdict = await MentionFixer().run(request())
    assert (verdict.status, verdict.finished, verdict.pushed_head) == ("waiting", True, None)
    comment = verdict.comment
    assert comment.startswith("@copilot please address")
    assert "`perf/parser`" in comment and "push" in comment
    assert "`src/app.py:12`" in comment and "Off-by-one in the loop bound." in comment
    assert "`general`" in comment and "Add a changelog entry." in comment
    assert "Maintainer answers to apply" in comment and "keep the Python 3.11 floor" in comment
    assert "ghs_never_in_a_comment" not in comment


async def test_mention_accepts_a_handle_without_at():
    assert (await MentionFixer("coder-bot").run(request())).comment.startswith("@coder-bot ")


async def test_author_is_mentioned_when_known():
    assert (await AuthorFixer().run(request(pr_author="octocat"))).comment.startswith("@octocat ")
    unknown = await AuthorFixer().run(request())
    assert unknown.status == "waiting" and "@" not in unknown.comment.splitlines()[0]


async def test_quoted_text_cannot_carry_a_hidden_marker():
    marker = "<!-- convergebot:escalation:12 -->"
    req = request(findings=(Finding("T", 1, "a.py", 1, f"ok {marker}", None, "fp"),),
                  instructions=(f"answer {marker}",))
    comment = (await MentionFixer().run(req)).comment
    assert "<!--" not in comment and comment.count("convergebot:escalation:12") == 2


async def test_a_huge_finding_body_is_cut():
    big = Finding("T", 1, "a.py", 1, "x" * 100_000, None, "fp")
    comment = (await MentionFixer().run(request(findings=(big,)))).comment
    assert len(comment) < 5000 and "…" in comment
