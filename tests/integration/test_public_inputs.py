"""What the HTTP surface tells and takes: /readyz names the broken part, never its error;
POST /api/prs takes only what `convergebot submit` would."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.surfaces.cli import main

from ..serving import make_config, serving

AUTH = {"Authorization": "Bearer api-token"}


async def test_readyz_names_the_unhealthy_part_and_keeps_the_error_to_the_log(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        rt.health.last_poll_error = ("OperationalError: connection to 10.1.2.3:5432 failed; "
                                     "[SQL: SELECT pull_requests.pr_key FROM pull_requests]")
        original = rt.db.sessions
        broken = create_async_engine("postgresql+asyncpg://nobody:hunter2@127.0.0.1:9/none")
        rt.db.sessions = async_sessionmaker(broken, class_=AsyncSession)
        try:
            r = await http.get("/readyz")
        finally:
            await broken.dispose()
            rt.db.sessions = original
            rt.health.last_poll_error = None

    assert r.status_code == 503
    assert r.json()["problems"] == ["database unreachable", "last poll failed"]
    for leak in ("10.1.2.3", "SELECT", "127.0.0.1", "hunter2", "Error"):
        assert leak not in r.text


@pytest.mark.parametrize("body, why", [
    ({"pr": "octo/repo#3", "max_rounds": 1_000_000}, "max_rounds must be an integer from 1 to 100"),
    ({"pr": "octo/repo#3", "max_rounds": 0}, "max_rounds"),
    ({"pr": "octo/repo#3", "max_rounds": True}, "max_rounds"),
    ({"pr": "octo/repo#3", "max_rounds": "5"}, "max_rounds"),
    ({"pr": "octo/repo#3", "max_rounds": 2.5}, "max_rounds"),
    ({"pr": "octo/repo#3", "no_merge": "false"}, "no_merge must be true or false"),
    ({"pr": "octo/repo#3", "rounds": 3}, "unknown field(s) rounds"),
    ({"pr": 3}, "expected JSON"),
    (["octo/repo#3"], "expected JSON"),
])
async def test_the_api_refuses_what_the_cli_would_and_enrolls_nothing(db_url, body, why):
    async with serving(make_config(db_url)) as (rt, http):
        r = await http.post("/api/prs", json=body, headers=AUTH)
        assert r.status_code == 400 and why in r.json()["error"]
        assert (await http.get("/api/prs")).json() == []


@pytest.mark.parametrize("raw", [b'{"pr": "octo/repo#3", "max_rounds": ' + b"9" * 5000 + b"}",
                                 b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe"])
async def test_a_body_json_cannot_read_is_a_400_not_a_500(db_url, raw):
    async with serving(make_config(db_url)) as (rt, http):
        r = await http.post("/api/prs", content=raw, headers=AUTH | {"Content-Type": "application/json"})
        assert r.status_code == 400 and "expected JSON" in r.json()["error"]


async def test_the_api_takes_the_largest_round_cap_and_a_boolean_no_merge(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        r = await http.post("/api/prs", json={"pr": "octo/repo#3", "max_rounds": 100, "no_merge": True},
                            headers=AUTH)
        assert r.status_code == 201
        view = (await http.get("/api/prs/octo/repo/3")).json()
        assert (view["max_rounds"], view["converge_only"]) == (100, True)


@pytest.mark.parametrize("rounds", ["0", "101", "1000000"])
def test_the_cli_refuses_a_round_cap_out_of_range_before_touching_the_database(
    tmp_path, monkeypatch, capsys, rounds
):
    monkeypatch.setenv("CONVERGEBOT_DATABASE_URL", f"sqlite:///{tmp_path / 'untouched.db'}")
    assert main(["submit", "octo/repo#3", "--max-rounds", rounds]) == 2
    assert "--max-rounds must be from 1 to 100" in capsys.readouterr().err
    assert not (tmp_path / "untouched.db").exists()
