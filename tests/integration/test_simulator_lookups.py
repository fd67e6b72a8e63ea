"""The simulator's lookups by repository and commit (`State.prs_of`, `prs_headed_in`,
`check_runs_at`, `check_suite_at`, `repo_by_id`) find what a scan of every record finds: each
record is indexed where it is made, and a record made without its index would be missed here."""

from __future__ import annotations

REPO, OTHER, FORK = "acme/widgets", "acme/gadgets", "dev/widgets"


async def test_lookups_find_what_a_scan_of_every_record_finds(sim):
    await sim.create_repo(REPO, files={"app.py": "one\n"})
    await sim.create_repo(OTHER, files={"app.py": "one\n"})
    await sim.fork_repo(REPO, "dev")
    prs = [
        await sim.open_pr(REPO, title="own", head="fix", files={"app.py": "two\n"}, author="alice"),
        await sim.open_pr(REPO, title="forked", head="fix", head_repo=FORK,
                          files={"app.py": "three\n"}, author="dev"),
        await sim.open_pr(OTHER, title="other", head="fix", files={"app.py": "four\n"}, author="bob"),
    ]
    heads = {(pr.repo, pr.number): pr.last_head for pr in prs}
    assert len(set(heads.values())) == 3
    for pr in prs:
        for name, app in (("ci", "github-actions"), ("lint", "github-actions"), ("convergebot", "convergebot")):
            await sim.create_check_run(pr.repo, head_sha=pr.last_head, name=name, app=app)
    s = sim.state

    for repo in s.repos.values():
        assert s.repo_by_id(repo.id) is repo
        assert s.prs_of(repo) == [pr for (name, _), pr in s.prs.items() if name == repo.full_name]
        assert s.prs_headed_in(repo) == [pr for pr in s.prs.values()
                                         if (pr.head_repo or pr.repo) == repo.full_name]
    assert [len(s.prs_headed_in(s.repos[n])) for n in (REPO, OTHER, FORK)] == [1, 1, 1]

    for pr in prs:
        repo, sha = s.repos[pr.repo], pr.last_head
        runs = s.check_runs_at(repo, sha)
        assert runs == [r for r in s.check_runs.values() if r.repo == pr.repo and r.head_sha == sha]
        assert [r.name for r in runs] == ["ci", "lint", "convergebot"]
        for app in ("github-actions", "convergebot"):
            suites = [x for x in s.check_suites.values()
                      if x.repo == pr.repo and x.head_sha == sha and x.app == app]
            assert len(suites) == 1 and s.check_suite_at(repo, sha, app) is suites[0]
    assert s.check_runs_at(s.repos[OTHER], heads[(REPO, prs[0].number)]) == []
    assert s.repo_by_id(-1) is None
