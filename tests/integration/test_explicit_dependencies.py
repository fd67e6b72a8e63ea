"""Dependencies given at enrollment (`submit --depends-on`, POST /api/prs `depends_on`,
`/converge start --depends-on`): stored with the PR beside its body's, kept when the body is read
again, written with the run they come with or not at all, and refused by name when malformed or
the PR itself (tests/e2e/test_explicit_dependencies.py drives them through the merge)."""

from __future__ import annotations

import asyncio

import jsonschema
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import event
from sqlmodel import select

from bot.engine.commands import execute
from bot.engine.read import dependencies_of
from bot.engine.submit import SubmitOptions, submit_pr
from bot.rules.commands import Command
from bot.surfaces.cli import main
from storage import dependencies, prs
from storage.database import Database
from storage.keys import parse_pr_key
from storage.migrate import SCRIPT_LOCATION, migrate
from storage.models import Dependency, PullRequest, Run

from ..helpers import enroll, finish
from ..serving import make_config, serving
from .resubmits import InjectedFault, finished_with_questions, resubmit_state

KEY = parse_pr_key("octo/app#9")
LIB, DOC, OTHER = parse_pr_key("octo/lib#1"), parse_pr_key("octo/app#4"), parse_pr_key("octo/app#5")
AUTH = {"Authorization": "Bearer api-token"}


async def _sources(db: Database, key=KEY) -> dict[str, list[str]]:
    deps = (await dependencies_of(db, [key])).get(key)
    return {k: list(v) for k, v in deps.sources.items()} if deps else {}


async def test_a_read_of_the_body_replaces_the_body_s_and_keeps_the_explicit_ones(db):
    await enroll(db, KEY, depends_on=(LIB, DOC))
    assert await _sources(db) == {DOC: ["explicit"], LIB: ["explicit"]}

    # The body names DOC too and OTHER: the PR depends on the union, DOC given both ways.
    assert await dependencies.replace_for(db, KEY, [OTHER, DOC]) == [OTHER, DOC, LIB]
    assert await _sources(db) == {DOC: ["body", "explicit"], OTHER: ["body"], LIB: ["explicit"]}
    assert sorted((await dependencies.edges(db))[KEY]) == sorted([OTHER, DOC, LIB]), "one edge per dependency"

    # The body edited: its lines gone, the explicit ones stay.
    assert await dependencies.replace_for(db, KEY, []) == [DOC, LIB]
    assert await _sources(db) == {DOC: ["explicit"], LIB: ["explicit"]}
    view = (await dependencies_of(db, [KEY]))[KEY]
    assert (view.depends_on, view.unmerged) == ((DOC, LIB), (DOC, LIB))
    async with db.read_session() as s:
        assert await dependencies.dependents(s, DOC) == [KEY]


async def test_a_dependency_given_both_ways_wakes_its_dependent_once(db):
    await enroll(db, KEY, depends_on=(DOC,))
    await dependencies.replace_for(db, KEY, [DOC])
    async with db.read_session() as s:
        assert await dependencies.dependents(s, DOC) == [KEY]


async def test_only_a_submit_that_starts_a_run_records_its_dependencies_and_a_resubmit_adds_to_them(db):
    await enroll(db, KEY, depends_on=(LIB,))
    running = await submit_pr(db, KEY, SubmitOptions(depends_on=(DOC,)))
    assert running.outcome == "already_running"
    assert await _sources(db) == {LIB: ["explicit"]}, "a submit that starts nothing changes nothing"

    await finish(db, KEY)
    again = await submit_pr(db, KEY, SubmitOptions(depends_on=(DOC, LIB)))
    assert again.outcome == "started"
    assert await _sources(db) == {DOC: ["explicit"], LIB: ["explicit"]}


class _FailDependencyInsert:
    """Raises InjectedFault right after the dependencies' insert runs, before its commit."""

    def __init__(self, db: Database) -> None:
        self.engine, self.hit = db.engine.sync_engine, False
        event.listen(self.engine, "after_cursor_execute", self._after)

    def _after(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO DEPENDENCIES"):
            self.hit = True
            raise InjectedFault(statement.splitlines()[0])

    def remove(self) -> None:
        event.remove(self.engine, "after_cursor_execute", self._after)


async def test_a_first_submit_whose_dependencies_fail_to_be_written_enrolls_nothing(db):
    # Committed apart, the PR would run (and could merge) without the dependency it was given.
    fault = _FailDependencyInsert(db)
    try:
        with pytest.raises(InjectedFault):
            await submit_pr(db, KEY, SubmitOptions(depends_on=(LIB,)))
    finally:
        fault.remove()
    assert fault.hit
    async with db.read_session() as s:
        assert [(await s.exec(select(m))).all() for m in (PullRequest, Run, Dependency)] == [[], [], []]
    assert (await submit_pr(db, KEY, SubmitOptions(depends_on=(LIB,)))).outcome == "started"
    assert await _sources(db) == {LIB: ["explicit"]}


async def test_a_resubmit_whose_dependencies_fail_to_be_written_leaves_the_pr_as_it_was(db):
    old = await finished_with_questions(db, KEY)
    fault = _FailDependencyInsert(db)
    try:
        with pytest.raises(InjectedFault):
            await submit_pr(db, KEY, SubmitOptions(depends_on=(LIB,)))
    finally:
        fault.remove()
    assert fault.hit
    assert await resubmit_state(db, KEY, old) == "old"
    assert await _sources(db) == {}


async def test_the_edges_read_from_bodies_before_sources_were_stored_are_the_body_s(db):
    """Migration 0012 rebuilds the table with `source` in its key: the edges it held were all
    read from bodies."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)

    def to(revision: str):
        def run(conn):
            cfg.attributes["connection"] = conn
            (command.downgrade if revision != "head" else command.upgrade)(cfg, revision)
        return run

    async with db.engine.begin() as conn:
        await conn.run_sync(to("0011"))
        await conn.execute(sa.text("INSERT INTO dependencies (pr_key, depends_on_key) VALUES (:k, :d)"),
                           [{"k": KEY, "d": LIB}, {"k": KEY, "d": DOC}])
    await migrate(db)
    assert await _sources(db) == {DOC: ["body"], LIB: ["body"]}
    await dependencies.replace_for(db, KEY, [])
    assert await _sources(db) == {}


# -- refused by name, nothing changed ------------------------------------------------------------

REFUSALS = [
    (["nonsense"], "malformed dependency 'nonsense': expected owner/repo#N or #N"),
    (["octo/lib#1", "#0"], "malformed dependency '#0': expected owner/repo#N or #N"),
    (["#9"], "octo/app#9 cannot depend on itself"),
    (["Octo/App#9"], "octo/app#9 cannot depend on itself"),
]


@pytest.mark.parametrize("given,why", REFUSALS)
async def test_the_api_refuses_a_malformed_dependency_or_the_pr_itself_by_name(db_url, given, why):
    async with serving(make_config(db_url)) as (rt, http):
        doc = (await http.get("/api/openapi.json")).json()
        r = await http.post("/api/prs", json={"pr": KEY, "max_rounds": 3, "depends_on": given}, headers=AUTH)
        assert (r.status_code, r.json()) == (400, {"error": why})
        schema = doc["paths"]["/api/prs"]["post"]["responses"]["400"]["content"]["application/json"]["schema"]
        jsonschema.Draft202012Validator({**schema, "components": doc["components"]}).validate(r.json())
        assert (await http.get("/api/prs")).json() == []
        assert await dependencies.edges(rt.db) == {}


@pytest.mark.parametrize("given", ["octo/lib#1", [1], {"pr": "octo/lib#1"}, [None]])
async def test_the_api_takes_depends_on_only_as_a_list_of_keys(db_url, given):
    async with serving(make_config(db_url)) as (rt, http):
        r = await http.post("/api/prs", json={"pr": KEY, "max_rounds": 3, "depends_on": given}, headers=AUTH)
        assert r.status_code == 400 and "depends_on must be a list of PR keys" in r.json()["error"]
        assert (await http.get("/api/prs")).json() == []


async def test_the_api_stores_and_shows_the_dependencies_it_is_given_as_documented(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        doc = (await http.get("/api/openapi.json")).json()
        r = await http.post("/api/prs", json={"pr": KEY, "max_rounds": 3, "depends_on": ["#4", "octo/lib#1", "#4"]},
                            headers=AUTH)
        assert r.status_code == 201, r.text
        detail = (await http.get("/api/prs/octo/app/9")).json()
        listed = (await http.get("/api/prs")).json()
    for one in (detail, listed[0]):
        assert (one["depends_on"], one["unmerged_deps"]) == ([DOC, LIB], [DOC, LIB])
        assert one["dependency_sources"] == {DOC: ["explicit"], LIB: ["explicit"]}
    one_schema = doc["paths"]["/api/prs/{owner}/{repo}/{number}"]["get"]["responses"]["200"]
    list_schema = doc["paths"]["/api/prs"]["get"]["responses"]["200"]
    for schema, answer in ((one_schema, detail), (list_schema, listed)):
        schema = schema["content"]["application/json"]["schema"]
        validator = jsonschema.Draft202012Validator({**schema, "components": doc["components"]})
        validator.validate(answer)
    # The sources are closed too: only `body` and `explicit`.
    with pytest.raises(jsonschema.ValidationError):
        validator.validate([{**listed[0], "dependency_sources": {DOC: ["guessed"]}}])


@pytest.mark.parametrize("given,why", REFUSALS)
def test_the_cli_refuses_a_malformed_dependency_or_the_pr_itself_before_touching_the_database(
        tmp_path, monkeypatch, capsys, given, why):
    db_file = tmp_path / "untouched.db"
    monkeypatch.setenv("CONVERGEBOT_DATABASE_URL", f"sqlite:///{db_file}")
    args = [a for g in given for a in ("--depends-on", g)]
    assert main(["submit", KEY, *args]) == 2
    assert capsys.readouterr().err.splitlines() == [f"convergebot: error: {why}"]
    assert not db_file.exists()


def test_the_cli_says_a_running_pr_s_dependencies_are_unchanged(sqlite_db_url, monkeypatch, capsys):
    monkeypatch.setenv("CONVERGEBOT_DATABASE_URL", sqlite_db_url)
    monkeypatch.setenv("CONVERGEBOT_GITHUB_API_URL", "http://127.0.0.1:9/")  # enrolled unchecked
    assert main(["submit", KEY, "--depends-on", "octo/lib#1"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"started {KEY} (") and out.out.rstrip().endswith(", depending on octo/lib#1")
    assert main(["submit", KEY, "--depends-on", "#4"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"already running {KEY}")
    assert f"{KEY}'s dependencies are unchanged" in out.err

    async def stored():
        db = Database(sqlite_db_url)
        try:
            return await _sources(db)
        finally:
            await db.dispose()

    assert asyncio.run(stored()) == {LIB: ["explicit"]}


@pytest.mark.parametrize("given,why", REFUSALS)
async def test_converge_start_refuses_a_malformed_dependency_or_the_pr_itself_and_starts_nothing(
        bare_runtime, db, given, why):
    rt = bare_runtime()  # no GitHub: the refusal comes before any read
    assert await execute(rt, KEY, Command("start", depends_on=tuple(given)), "maint") \
        == (False, f"Nothing was started: {why}.")
    assert await prs.get(db, KEY) is None
    assert await dependencies.edges(db) == {}
