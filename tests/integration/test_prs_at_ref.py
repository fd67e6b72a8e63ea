"""`prs.active_at`: the active PRs a status, check or push names, chosen by the database."""

from __future__ import annotations

from bot.engine.submit import abandon_pr
from storage import prs

from ..helpers import enroll

SHA = "a" * 40


async def _at(db, key: str, sha: str, branch: str) -> None:
    pk = (await prs.get(db, key)).pr.process_key
    assert await prs.fenced_update(db, key, pk, {"head_sha": sha, "head_branch": branch})


async def test_a_ref_names_the_active_prs_of_its_repository_only(db):
    for key in ("octo/repo#1", "octo/repo#2", "octo/other#1", "octo/repo#3"):
        await enroll(db, key)
    await _at(db, "octo/repo#1", SHA, "feature")
    await _at(db, "octo/repo#2", "b" * 40, "feature")
    await _at(db, "octo/other#1", SHA, "feature")  # the same sha and branch, another repository
    await _at(db, "octo/repo#3", SHA, "feature")
    await abandon_pr(db, "octo/repo#3", "stop")  # at the ref, but no longer driven

    def keys(views):
        return sorted(v.pr.pr_key for v in views)

    assert keys(await prs.active_at(db, "Octo/Repo", sha=SHA)) == ["octo/repo#1"]
    assert keys(await prs.active_at(db, "octo/repo", branch="feature")) == ["octo/repo#1", "octo/repo#2"]
    assert keys(await prs.active_at(db, "octo/repo", sha="c" * 40, branch="feature")) == ["octo/repo#1", "octo/repo#2"]
    assert await prs.active_at(db, "octo/repo") == []
    assert await prs.active_at(db, "octo/repo", sha="c" * 40) == []
