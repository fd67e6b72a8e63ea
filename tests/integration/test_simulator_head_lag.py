"""A PR object whose head.sha lags its branch ref after a push, as GitHub's does for a while."""

from __future__ import annotations

import pytest

from bot.github.client import GitHubClient, open_github

from ..simulator_fixtures import api, git, sim, simulator  # noqa: F401

REPO = "acme/widgets"
PULL = f"repos/{REPO}/pulls"
CONTROL = f"_sim/repos/{REPO}/pulls"


@pytest.fixture
async def number(sim):  # noqa: F811
    await sim.create_repo(REPO, files={"a.py": "x = 1\n"})
    pr = await sim.open_pr(REPO, title="Change x", head="change", author="alice",
                           files={"a.py": "x = 2\n"})
    return pr.number


async def _heads(api, number: int) -> tuple[str, str, str]:  # noqa: F811
    """(the PR object's head.sha, the list's head.sha, the branch ref's sha)"""
    pull = (await api.get(f"{PULL}/{number}")).json()
    (listed,) = (await api.get(PULL)).json()
    ref = (await api.get(f"repos/{REPO}/git/ref/heads/change")).json()
    return pull["head"]["sha"], listed["head"]["sha"], ref["object"]["sha"]


async def test_the_pr_object_keeps_its_head_until_released_while_the_ref_moves(
        api, sim, number):  # noqa: F811
    before = (await api.get(f"{PULL}/{number}")).json()["head"]["sha"]
    lag = await sim.lag_pr_head(REPO, number)
    assert (lag.sha, lag.reads_left) == (before, None)

    pushed = await sim.push(REPO, "change", {"b.py": "y\n"}, author="alice")
    for _ in range(3):  # no read count: it lags however often it is read
        assert await _heads(api, number) == (before, before, pushed)
    # The push was real: its webhook names the new head; the state dump reads git.
    sync = sim.webhooks.find("pull_request", "synchronize")[-1]
    assert sync.payload["pull_request"]["head"]["sha"] == pushed
    state = await sim.dump_state()
    assert state["repos"][0]["pulls"][0]["head_sha"] == pushed
    assert state["head_lags"] == [{"repo": REPO, "number": number, "sha": before, "reads_left": None}]

    assert sim.release_pr_head(REPO, number) is True
    assert await _heads(api, number) == (pushed, pushed, pushed)
    assert sim.release_pr_head(REPO, number) is False
    assert sim.head_lag(REPO, number) is None


async def test_a_lag_for_n_reads_ends_by_itself(api, sim, number):  # noqa: F811
    before = (await api.get(f"{PULL}/{number}")).json()["head"]["sha"]
    await sim.lag_pr_head(REPO, number, reads=2)
    pushed = await sim.push(REPO, "change", {"b.py": "y\n"}, author="alice")

    first = (await api.get(f"{PULL}/{number}")).json()["head"]["sha"]
    assert sim.head_lag(REPO, number).reads_left == 1
    (second,) = [p["head"]["sha"] for p in (await api.get(PULL)).json()]  # the list reads too
    third = (await api.get(f"{PULL}/{number}")).json()["head"]["sha"]
    assert (first, second, third) == (before, before, pushed)
    assert sim.head_lag(REPO, number) is None


async def test_a_git_push_lags_too_and_the_bot_s_client_sees_both_heads(
        simulator, sim, number, tmp_path):  # noqa: F811
    """Through the bot's own client: `pull` shows the lagging head, `branch_head` the branch."""
    before = (await sim.dump_state())["repos"][0]["pulls"][0]["head_sha"]
    await sim.lag_pr_head(REPO, number)
    work = tmp_path / "work"
    await git("clone", "-q", "--branch", "change", sim.repo(REPO).git_dir.as_uri(), str(work))
    (work / "c.py").write_text("z = 3\n")
    await git("add", "c.py", cwd=work)
    await git("commit", "-qm", "more", cwd=work)
    await git("push", "-q", "origin", "HEAD:change", cwd=work)
    pushed = (await git("rev-parse", "HEAD", cwd=work)).strip()
    assert pushed != before

    async with open_github(api_url=simulator.url, token="t", timeout=5, read_timeout=5) as gh:
        client = GitHubClient(gh, max_concurrency=2, call_timeout=10)
        assert (await client.pull("acme", "widgets", number))["head"]["sha"] == before
        assert await client.branch_head("acme", "widgets", "change") == pushed
        sim.release_pr_head(REPO, number)
        assert (await client.pull("acme", "widgets", number))["head"]["sha"] == pushed


async def test_only_open_prs_lag_and_writes_answer_the_truth(api, sim, number):  # noqa: F811
    before = (await api.get(f"{PULL}/{number}")).json()["head"]["sha"]
    await sim.lag_pr_head(REPO, number)
    pushed = await sim.push(REPO, "change", {"b.py": "y\n"}, author="alice")
    edited = await api.patch(f"{PULL}/{number}", json={"title": "Change x again"})
    assert edited.json()["head"]["sha"] == pushed  # a write's answer is not a lagging read
    assert (await api.get(f"{PULL}/{number}")).json()["head"]["sha"] == before
    await sim.close_pr(REPO, number)
    assert (await api.get(f"{PULL}/{number}")).json()["head"]["sha"] == pushed


async def test_the_control_api(api, sim, number):  # noqa: F811
    before = (await api.get(f"{PULL}/{number}")).json()["head"]["sha"]
    assert (await api.get(f"{CONTROL}/{number}/head-lag")).json() is None
    put = await api.put(f"{CONTROL}/{number}/head-lag", json={"reads": 1})
    assert put.status_code == 200 and put.json() == {"sha": before, "reads_left": 1}
    assert (await api.get(f"{CONTROL}/{number}/head-lag")).json() == {"sha": before, "reads_left": 1}
    pushed = (await api.post(f"_sim/repos/{REPO}/push",
                             json={"branch": "change", "files": {"b.py": "y\n"}})).json()["sha"]
    assert (await api.get(f"{PULL}/{number}")).json()["head"]["sha"] == before
    assert (await api.get(f"{PULL}/{number}")).json()["head"]["sha"] == pushed  # one read only

    assert (await api.put(f"{CONTROL}/{number}/head-lag", json={})).json() == {
        "sha": pushed, "reads_left": None}
    assert (await api.delete(f"{CONTROL}/{number}/head-lag")).json() == {"released": True}
    assert (await api.delete(f"{CONTROL}/{number}/head-lag")).json() == {"released": False}

    for bad in (0, -1, "2", True):
        refused = await api.put(f"{CONTROL}/{number}/head-lag", json={"reads": bad})
        assert refused.status_code == 422, bad
    assert (await api.put(f"{CONTROL}/999/head-lag", json={})).status_code == 404
    assert sim.head_lag(REPO, number) is None
