"""A repository's `.github/convergebot.toml` sets its own PRs' settings, and only theirs."""

from __future__ import annotations

import json

import pytest
from structlog.testing import capture_logs

from bot.engine import repoconfig
from bot.github.errors import Unavailable
from bot.surfaces.cli import _check_pr_exists
from storage.keys import parse_pr_key

from .harness import FILES, REPO, bot_on_simulator, quiesce, steps

CONTENTS = "/repos/{owner}/{repo}/contents/{path}"
COLLABORATORS = {"maint": "write"}


async def _repo(h, name: str, config: str | None) -> str:
    files = dict(FILES) | ({repoconfig.PATH: config} if config is not None else {})
    await h.sim.create_repo(name, files=files, collaborators=COLLABORATORS)
    h.sim.set_reviewer(name, steps(1, 0))  # one finding, then a clean review
    return name


async def _open(h, repo: str, head: str, command: str | None = "/converge", labels=()) -> str:
    pr = await h.sim.open_pr(repo, title=f"Change {head}", head=head, author="dev", labels=labels,
                             files={"app/core.py": f"def f():\n    return '{head}'\n"})
    if command:
        await h.sim.comment(repo, pr.number, command, user="maint")
    return f"{repo}#{pr.number}"


async def _check_run(h, key: str, head: str) -> dict:
    owner, _, rest = key.partition("/")
    repo = rest.partition("#")[0]

    async def completed():
        found = [r for r in await h.rt.github.check_runs(owner, repo, head) if r["name"] == "convergebot"]
        return found[0] if found and found[0]["status"] == "completed" else None

    return await h.wait_for(f"{key}'s check run to complete", completed)


def _merges(h, repo: str) -> dict[int, str]:
    return {e["number"]: e["method"] for e in h.sim.effects("merge") if e["repo"] == repo}


async def test_a_repository_max_rounds_and_merge_method_apply_to_its_prs_only(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        strict = await _repo(h, "acme/strict", '[convergence]\nmax_rounds = 1\n\n[merge]\nmethod = "rebase"\n')
        plain = await _open(h, REPO, "plain")
        capped = await _open(h, strict, "capped")
        labelled = await _open(h, strict, "labelled", command=None, labels=["converge"])  # the enroll job
        explicit = await _open(h, strict, "explicit", command="/converge start --rounds 3")

        # acme/app has no file: the global settings (8 rounds, squash), two rounds, merged.
        view = await h.wait_status(plain, "merged", timeout=60)
        assert view.pr.max_rounds == 8 and view.pr.current_round == 2
        assert _merges(h, REPO) == {view.pr.number: "squash"}

        # acme/strict's PRs get its one round: the finding of round 1 is fixed, and the round
        # a second review would need is past the cap, so the maintainers are asked.
        view = await h.wait_status(capped, "escalated", timeout=60)
        assert view.pr.max_rounds == 1
        assert [e.kind for e in await h.escalations(capped)] == ["round_cap"]
        view = await h.wait_status(labelled, "escalated", timeout=60)
        assert view.pr.max_rounds == 1 and view.pr.submitted_by == "label"

        # An explicit count wins over the repository's; its merge method is the repository's.
        view = await h.wait_status(explicit, "merged", timeout=60)
        assert view.pr.max_rounds == 3 and view.pr.current_round == 2
        assert _merges(h, strict) == {view.pr.number: "rebase"}
        run = await _check_run(h, explicit, view.pr.converged_head)
        assert "round 2/3" in run["output"]["title"]
        assert "Repository configuration" not in run["output"]["summary"]
        await quiesce(h)

        # The API and the CLI take the repository's count too, when none is given.
        h.sim.set_reviewer(strict, steps(0))
        by_api = await _open(h, strict, "api", command=None)
        r = await h.http.post("/api/prs", json={"pr": by_api}, headers={"Authorization": "Bearer api-token"})
        assert r.status_code == 201, r.text
        assert (await h.view(by_api)).pr.max_rounds == 1
        by_cli = await _open(h, strict, "cli", command=None)
        assert (await _check_pr_exists(h.rt.config, parse_pr_key(by_cli), True)).convergence.max_rounds == 1
        assert (await _check_pr_exists(h.rt.config, parse_pr_key(f"{REPO}#1"), True)).convergence.max_rounds == 8
        await quiesce(h)


async def test_a_broken_repository_file_is_reported_and_the_global_settings_apply(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        syntax = await _repo(h, "acme/syntax", '[convergence]\nmax_rounds = 1\nreviewers = "a" "b"\n')
        unknown = await _repo(h, "acme/unknown", "[convergence]\nmax_rounds = 1\n\n[server]\nport = 1\n")
        keys = {repo: await _open(h, repo, "feat") for repo in (syntax, unknown)}

        for repo, key in keys.items():
            # The file's max_rounds = 1 is ignored with the rest of it: two rounds, merged.
            view = await h.wait_status(key, "merged", timeout=60)
            assert view.pr.max_rounds == 8 and view.pr.current_round == 2
            assert _merges(h, repo) == {view.pr.number: "squash"}
            summary = (await _check_run(h, key, view.pr.converged_head))["output"]["summary"]
            assert "Repository configuration ignored" in summary, summary
            assert repoconfig.PATH in summary
            if repo == syntax:
                assert "invalid TOML" in summary and "line 3" in summary, summary
            else:
                assert "line 4: [server] cannot be set by a repository" in summary, summary
        await quiesce(h)


async def test_the_file_is_read_conditionally_once_per_interval(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 60}) as h:
        rt = h.rt
        repo = await _repo(h, "acme/quiet", "[convergence]\nmax_rounds = 2\n")
        await _repo(h, "acme/none", None)
        await _repo(h, "acme/bad", "[convergence]\nmax_rounds = 0\n")
        await h.sim.settle()
        h.sim.counters.reset()

        def reads(status: int | None = None) -> int:
            return h.sim.counters.get("GET", CONTENTS, status)

        assert (await repoconfig.effective_config(rt, repo)).convergence.max_rounds == 2
        assert (await repoconfig.effective_config(rt, repo)).convergence.max_rounds == 2
        assert (reads(), reads(200)) == (1, 1)  # the second: from the process's copy, no request

        repoconfig.forget(rt, repo)  # as when its interval is over
        assert (await repoconfig.effective_config(rt, repo)).convergence.max_rounds == 2
        assert (reads(), reads(304)) == (2, 1)  # revalidated: a 304, free of rate limit

        # A push to the default branch that changes the file is read at the next use.
        await h.sim.push(repo, "main", {repoconfig.PATH: "[convergence]\nmax_rounds = 5\n"}, author="maint")
        await h.sim.settle()
        push = json.loads(h.sim.webhooks.find("push")[-1].body)
        assert [c["modified"] for c in push["commits"]] == [[repoconfig.PATH]]  # as GitHub lists it
        assert (await repoconfig.effective_config(rt, repo)).convergence.max_rounds == 5
        assert (reads(), reads(200)) == (3, 2)

        # No file: a 404, not asked again within the interval; the global settings apply.
        for _ in range(2):
            assert (await repoconfig.effective_config(rt, "acme/none")).convergence.max_rounds == 8
        assert h.sim.counters.get("GET", CONTENTS, 404) == 1
        # Missing, it stays missing for an hour (past the scan interval), then is asked again.
        entry = repoconfig._cache(rt).entries["acme/none"]
        entry.read_at -= rt.config.scan.interval_seconds + 1
        await repoconfig.effective_config(rt, "acme/none")
        assert h.sim.counters.get("GET", CONTENTS, 404) == 1
        entry.read_at -= repoconfig.ABSENT_SECONDS
        await repoconfig.effective_config(rt, "acme/none")
        assert h.sim.counters.get("GET", CONTENTS, 404) == 2

        # An invalid file: the global settings, and one warning per version of the file.
        with capture_logs() as logs:
            for _ in range(3):
                repoconfig.forget(rt, "acme/bad")
                result = await repoconfig.repo_config(rt, "acme/bad")
        assert result.config.convergence.max_rounds == 8
        assert "max_rounds: Input should be greater than or equal to 1" in result.problem
        warned = [e for e in logs if e["event"] == "repo_config.invalid"]
        assert len(warned) == 1 and warned[0]["repo"] == "acme/bad" and warned[0]["sha"] == result.sha

        # A read failing for now keeps the copy there is, and with none fails the caller (its job
        # retries); a refusal means the global settings, never a PR stuck on a file.
        h.sim.inject_fault(r"^/repos/acme/quiet/contents/", method="GET", status=502, count=1)
        repoconfig.forget(rt, repo)
        assert (await repoconfig.effective_config(rt, repo)).convergence.max_rounds == 5
        await _repo(h, "acme/down", "[convergence]\nmax_rounds = 2\n")
        h.sim.inject_fault(r"^/repos/acme/down/contents/", method="GET", status=502, count=1)
        with pytest.raises(Unavailable):
            await repoconfig.effective_config(rt, "acme/down")
        assert (await repoconfig.effective_config(rt, "acme/down")).convergence.max_rounds == 2
        # A 401 (an App reinstalled, its old token refused) keeps the copy too.
        repoconfig.forget(rt, "acme/down")
        h.sim.inject_fault(r"^/repos/acme/down/contents/", method="GET", status=401, count=1)
        assert (await repoconfig.effective_config(rt, "acme/down")).convergence.max_rounds == 2
        await _repo(h, "acme/refused", "[convergence]\nmax_rounds = 2\n")
        h.sim.inject_fault(r"^/repos/acme/refused/contents/", method="GET", status=405, count=1)
        assert (await repoconfig.effective_config(rt, "acme/refused")).convergence.max_rounds == 8
