"""The GitHub client in dry run: reads go through, every write is refused before it is sent."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.github.client import GitHubClient, open_github
from bot.github.endpoints.reviews import ThreadWrite
from bot.github.transport import DryRunRefused

from ..simulator_fixtures import sim, simulator  # noqa: F401

REPO = "acme/lib"
READS = ("GET", "HEAD")


def writes_sent(sim) -> int:  # noqa: F811
    """Requests that could have changed GitHub: any method but GET/HEAD, and GraphQL mutations
    (the simulator records each mutation as a side effect; a POST /graphql may be a query)."""
    return sum(n for (method, route, _), n in sim.counters._counts.items()
               if method not in READS and route != "/graphql") + len(sim.effects())


@pytest.fixture
async def client(simulator, sim):  # noqa: F811
    await sim.create_repo(REPO, collaborators={"maint": "write"})
    async with open_github(api_url=simulator.url, token="t", timeout=2, read_timeout=2) as gh:
        c = GitHubClient(gh, max_concurrency=4, call_timeout=4)
        c.dry_run = True
        yield c


async def test_in_dry_run_every_write_is_refused_and_nothing_reaches_github(client, sim):  # noqa: F811
    pr = await sim.open_pr(REPO, title="t", head="feat", author="dev", files={"a.txt": "a\n"})
    await sim.settle()
    sim.side_effects.clear()
    before = sim.counters.total()
    head = (await client.pull("acme", "lib", pr.number))["head"]["sha"]  # a REST read
    threads = await client.review_threads("acme", "lib", pr.number)  # a GraphQL query
    assert threads == []
    reads = sim.counters.total() - before
    assert reads == 2

    attempts = {
        "comment": client.comment_once("acme", "lib", pr.number, "convergebot:x", "hello"),
        "review request": client.request_review("acme", "lib", pr.number, ["maint"]),
        "check run": client.create_check_run("acme", "lib", name="convergebot", head_sha=head),
        "merge": client.merge("acme", "lib", pr.number, head),
        "update branch": client.update_branch("acme", "lib", pr.number, head),
        "reaction": client.react("acme", "lib", 1, "eyes"),
        "thread replies (a GraphQL mutation)": client.write_threads([ThreadWrite("T_1", "Fixed.", True)]),
    }
    for what, attempt in attempts.items():
        with pytest.raises(DryRunRefused, match="dry run"):
            await attempt
        assert writes_sent(sim) == 0, what
    # The comment's look for its marker is a read and was made; the write after it was not.
    assert sim.effects() == []
    assert sim.counters.get(method="GET") >= 3
    # A mutation is read as GraphQL reads the document: after a comma, behind a `#` in a
    # string, or in a document that does not parse, it is still no query.
    for document in ('query Q { viewer { login } } ,mutation M { x }',
                     'query Q { a(s: "#") { b } } mutation M { x }', "mutation {"):
        with pytest.raises(DryRunRefused):
            await client._graphql("hostile", document, {})
    assert writes_sent(sim) == 0 and sim.effects() == []


async def test_in_dry_run_an_app_still_mints_its_installation_token(simulator, sim):  # noqa: F811
    await sim.create_repo(REPO)
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    # Ids of its own: githubkit caches installation tokens process-wide by (app, installation).
    async with open_github(api_url=simulator.url, app_id="9301", private_key=pem, installation_id=9302) as gh:
        client = GitHubClient(gh)
        client.dry_run = True
        assert (await client.repo("acme", "lib"))["full_name"] == REPO
        assert await client.clone_token() in sim.issued_tokens
        with pytest.raises(DryRunRefused):
            await client.redeliver(1)  # the App's own write (a redelivery) is a write too
    assert sim.counters.get(method="POST", route="/app/installations/{installation_id}/access_tokens") >= 1


async def test_without_dry_run_the_same_write_reaches_github(client, sim):  # noqa: F811
    pr = await sim.open_pr(REPO, title="t", head="feat", author="dev", files={"a.txt": "a\n"})
    await sim.settle()
    sim.side_effects.clear()
    sim.counters.reset()
    client.dry_run = False
    await client.comment_once("acme", "lib", pr.number, "convergebot:x", "hello")
    assert [e["body"].split("\n")[0] for e in sim.effects("issue_comment")] == ["hello"]
    assert writes_sent(sim) > 0  # the measure the dry-run test holds at 0 does see a write


@pytest.mark.parametrize("dry_run", [True, False])
async def test_doctor_says_when_the_dry_run_is_on(tmp_path, simulator, dry_run):  # noqa: F811
    from bot.surfaces.doctor import run_doctor
    from tests.serving import make_config

    lines: list[str] = []
    config = make_config(f"sqlite:///{tmp_path / 'd.db'}", api_url=simulator.url, github={"dry_run": dry_run})
    await run_doctor(config, say=lines.append)
    said = [line for line in lines if "dry run" in line]
    assert said == (["[warn] dry run: on (github.dry_run): serve reads and decides, and writes nothing to GitHub"]
                    if dry_run else [])
