"""The list of PRs a page at a time (`/api/prs`, `/`, `convergebot status`): the working set by
default (every unfinished PR, and those finished within a week), the whole history on asking,
filters the database applies, and a cursor that neither skips nor repeats a row."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from storage import prs
from storage.database import Database
from storage.models import PullRequest, utcnow

from ..helpers import enroll, finish
from ..serving import make_config, serving
from .test_cli import cli_env
from .test_cli_errors import convergebot, one_line

ACTIVE, OLD, RECENT = 60, 30, 10  # PRs driven, finished a month ago, finished today


async def _history(db: Database) -> dict[str, set[str]]:
    """Enrolled PRs: some still driven, some finished long ago, some finished today; a handful
    share one enrollment time, as PRs enrolled in one transaction of a burst can."""
    keys: dict[str, set[str]] = {"active": set(), "old": set(), "recent": set()}
    for i in range(ACTIVE + OLD + RECENT):
        repo = "acme/app" if i % 2 else "octo/lib"
        key = f"{repo}#{i + 1}"
        await enroll(db, key, title=f"PR {i + 1}", url=f"https://github.com/{repo}/pull/{i + 1}")
        kind = "active" if i < ACTIVE else "old" if i < ACTIVE + OLD else "recent"
        if kind != "active":
            await finish(db, key, "merged")
        keys[kind].add(key)
    async with db.session() as s:
        month_ago = utcnow() - timedelta(days=30)
        await s.exec(update(PullRequest).where(PullRequest.pr_key.in_(sorted(keys["old"])))
                     .values(updated_at=month_ago))
        tie = utcnow() - timedelta(hours=1)
        await s.exec(update(PullRequest).where(PullRequest.pr_key.in_(
            ["acme/app#2", "acme/app#4", "octo/lib#3", "octo/lib#5", "acme/app#6"])).values(created_at=tie))
    return keys


async def _all_pages(http, first: str) -> tuple[list[str], list[int]]:
    """Every row's key following the `Link: rel="next"` headers, and each page's size."""
    keys, sizes, url = [], [], first
    while url:
        r = await http.get(url)
        assert r.status_code == 200, r.text
        keys += [row["pr_key"] for row in r.json()]
        sizes.append(len(r.json()))
        link = r.headers.get("link")
        url = link[link.index("<") + 1:link.index(">")] if link else None
        assert not link or link.endswith('rel="next"'), link
    return keys, sizes


async def test_the_api_pages_the_working_set_by_default_and_the_history_on_asking(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        keys = await _history(rt.db)
        current = keys["active"] | keys["recent"]

        first = await http.get("/api/prs", params={"limit": "25"})
        assert first.status_code == 200 and len(first.json()) == 25
        assert first.headers["x-total-count"] == str(len(current))
        got, sizes = await _all_pages(http, "/api/prs?limit=25")
        assert sorted(got) == sorted(current) and len(got) == len(set(got)), "a row skipped or repeated"
        assert sizes == [25, 25, 20]

        got, _ = await _all_pages(http, "/api/prs?scope=all&limit=7")
        assert sorted(got) == sorted(keys["active"] | keys["old"] | keys["recent"]) and len(got) == len(set(got))
        # The order is the enrollment's, ties by key: a page read later starts where the last ended.
        stamps = {v.pr.pr_key: (v.pr.created_at, v.pr.pr_key)
                  for v in (await prs.page(rt.db, limit=500)).views}
        assert got == sorted(got, key=lambda k: stamps[k])

        merged = await http.get("/api/prs", params={"status": "merged"})
        assert {r["pr_key"] for r in merged.json()} == keys["recent"]
        merged_ever = await http.get("/api/prs", params={"status": "merged", "scope": "all", "limit": "500"})
        assert {r["pr_key"] for r in merged_ever.json()} == keys["old"] | keys["recent"]
        assert "link" not in merged_ever.headers
        octo = await http.get("/api/prs", params={"repo": "OCTO/Lib", "scope": "all", "limit": "500"})
        assert {r["pr_key"] for r in octo.json()} == {k for ks in keys.values() for k in ks if k.startswith("octo/")}


@pytest.mark.parametrize(("params", "says"), [
    ({"limit": "0"}, "limit must be a number from 1 to 500"),
    ({"limit": "501"}, "limit must be a number from 1 to 500"),
    ({"limit": "ten"}, "limit must be a number from 1 to 500"),
    ({"scope": "everything"}, "scope must be one of current, all"),
    ({"status": "done"}, "unknown status 'done'"),
    ({"cursor": "not a cursor"}, "malformed cursor"),
    ({"cursor": "bm90IGEgY3Vyc29y"}, "malformed cursor"),  # base64 of text that is not one
])
async def test_a_list_query_it_cannot_answer_is_a_400_that_says_why(db_url, params, says):
    async with serving(make_config(db_url)) as (rt, http):
        r = await http.get("/api/prs", params=params)
        assert r.status_code == 400 and says in r.json()["error"], r.text
        page = await http.get("/", params=params)
        assert page.status_code == 400 and says in page.text.replace("&#39;", "'")


async def test_the_dashboard_shows_a_page_and_links_the_next(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        keys = await _history(rt.db)
        page = (await http.get("/", params={"limit": "50"})).text
        assert f"50 of {ACTIVE + RECENT} PR(s) shown" in page and "finished within 7 days" not in page
        assert 'id="next-page"' in page
        link = page[page.index('href="', page.index('id="next-page"') - 200):]
        nxt = link[len('href="'):link.index('"', len('href="'))].replace("&amp;", "&")
        assert nxt.startswith("/?") and "cursor=" in nxt and "limit=50" in nxt
        second = (await http.get(nxt)).text
        assert f"20 of {ACTIVE + RECENT} PR(s) shown" in second and 'id="next-page"' not in second
        shown = {k for k in keys["active"] | keys["recent"] if f'data-pr="{k}"' in page + second}
        assert shown == keys["active"] | keys["recent"]
        assert not [k for k in keys["old"] if f'data-pr="{k}"' in page + second]
        everything = (await http.get("/", params={"scope": "all", "limit": "500"})).text
        assert f"{ACTIVE + OLD + RECENT} of {ACTIVE + OLD + RECENT} PR(s) shown" in everything


async def test_status_lists_the_working_set_and_every_pr_with_all(db_url):
    import json

    db = Database(db_url)
    try:
        keys = await _history(db)
    finally:
        await db.dispose()
    env = cli_env(db_url)
    code, out, err = await convergebot("status", "--json", env=env)
    assert code == 0, err
    assert sorted(r["pr_key"] for r in json.loads(out)) == sorted(keys["active"] | keys["recent"])
    code, out, err = await convergebot("status", "--all", "--json", env=env)
    assert code == 0, err
    assert len(json.loads(out)) == ACTIVE + OLD + RECENT  # more than one page of 500 would be paged alike


async def test_status_with_only_old_history_says_where_it_is(db_url):
    db = Database(db_url)
    try:
        await enroll(db, "acme/app#1")
        await finish(db, "acme/app#1", "merged")
        async with db.session() as s:
            await s.exec(update(PullRequest).values(updated_at=utcnow() - timedelta(days=30)))
    finally:
        await db.dispose()
    code, out, err = await convergebot("status", env=cli_env(db_url))
    assert code == 0 and "`status --all` lists every one" in out, (out, err)
    assert one_line(out)
