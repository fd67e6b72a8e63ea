"""/readyz, /metrics and /api/prs on the real server."""

from __future__ import annotations

from storage import jobs, prs

from ..helpers import polled, until
from ..serving import make_config, serving


async def test_readyz_reports_each_unhealthy_part(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        await until("the start-up poll", lambda: polled(rt))  # it would clear the error set below
        ok = await http.get("/readyz")
        assert ok.status_code == 200 and ok.json()["problems"] == []

        rt.health.last_poll_error = "RuntimeError: boom"
        r = await http.get("/readyz")
        assert r.status_code == 503 and "last poll failed" in r.json()["problems"][0]
        rt.health.last_poll_error = None

        rt.health.scheduler_running = False
        r = await http.get("/readyz")
        assert r.status_code == 503 and r.json()["problems"] == ["scheduler not running"]
        rt.health.scheduler_running = True

        original = rt.db.sessions
        from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
        from sqlmodel.ext.asyncio.session import AsyncSession

        broken = create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:9/none")
        rt.db.sessions = async_sessionmaker(broken, class_=AsyncSession)
        try:
            r = await http.get("/readyz")
            assert r.status_code == 503 and r.json()["problems"][0].startswith("database")
        finally:
            await broken.dispose()
            rt.db.sessions = original

        metrics = await http.get("/metrics")
        assert metrics.status_code == 200 and "convergebot_polls_total" in metrics.text


async def test_api_enrolls_with_a_bearer_token_and_reads_back(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        assert (await http.post("/api/prs", json={"pr": "octo/repo#3"})).status_code == 401
        bad_token = {"Authorization": "Bearer nope"}
        for headers in (bad_token, {"Authorization": "api-token"}, {"Authorization": "Bearer api-tokenX"}):
            refused = await http.post("/api/prs", json={"pr": "octo/repo#3"}, headers=headers)
            assert refused.status_code == 401 and refused.json() == {"error": "a valid bearer token is required"}
        assert (await http.get("/api/prs")).json() == [] and await jobs.list_jobs(rt.db) == []
        auth = {"Authorization": "Bearer api-token"}
        r = await http.post("/api/prs", json={"pr": "octo/repo"}, headers=auth)
        assert r.status_code == 400 and "malformed PR key" in r.json()["error"]
        r = await http.post("/api/prs", content=b"{nope", headers=auth)
        assert r.status_code == 400
        r = await http.post("/api/prs", json={"pr": "octo/repo#3", "max_rounds": 0}, headers=auth)
        assert r.status_code == 400

        first = await http.post("/api/prs", json={"pr": "Octo/Repo#3", "max_rounds": 4}, headers=auth)
        assert first.status_code == 201 and first.json()["outcome"] == "started"
        again = await http.post("/api/prs", json={"pr": "octo/repo#3"}, headers=auth)
        assert again.status_code == 200 and again.json()["outcome"] == "already_running"
        assert again.json()["process_key"] == first.json()["process_key"]

        one = await http.get("/api/prs/octo/repo/3")
        assert one.status_code == 200
        assert (one.json()["status"], one.json()["max_rounds"]) == ("converging", 4)
        assert (await http.get("/api/prs/octo/repo/4")).status_code == 404
        assert (await http.get("/api/prs/-bad-/repo/4")).status_code == 400
        assert [p["pr_key"] for p in (await http.get("/api/prs")).json()] == ["octo/repo#3"]


async def test_api_refuses_malformed_keys_with_a_json_error_and_creates_nothing(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        for path, why in (("/api/prs/a/b/x", "malformed PR number 'x'"),
                          ("/api/prs/bad!owner/repo/1", "malformed PR key"),
                          ("/api/prs/-bad-/repo/4", "malformed PR key"),
                          ("/api/prs/octo/repo/0", "malformed PR key 'octo/repo#0'"),
                          ("/api/prs/octo/repo/-1", "malformed PR number")):
            r = await http.get(path)
            assert r.status_code == 400 and r.headers["content-type"] == "application/json", path
            assert why in r.json()["error"], (path, r.json())
        r = await http.get("/api/prs/octo/repo/12")
        assert r.status_code == 404 and r.json() == {"error": "octo/repo#12 is not enrolled"}
        # The router's own refusals under /api answer in the same shape.
        r = await http.get("/api/prs/octo/repo")
        assert r.status_code == 404 and r.json() == {"error": "Not Found: GET /api/prs/octo/repo"}
        r = await http.delete("/api/prs")
        assert r.status_code == 405 and r.json()["error"].startswith("Method Not Allowed")
        assert (await http.get("/nowhere")).text == "Not Found"
        assert (await http.get("/api/prs")).json() == []
        assert await prs.list_all(rt.db) == [] and await jobs.list_jobs(rt.db) == []


async def test_dashboard_lists_prs_rounds_and_open_escalations_escaped(db_url):
    from storage import escalations, prs

    from ..helpers import enroll

    async with serving(make_config(db_url)) as (rt, http):
        key = "octo/repo#9"
        pk = await enroll(rt.db, key, title="<script>alert(1)</script>")
        await prs.fenced_update(rt.db, key, pk, {"status": "escalated", "last_action": "escalated: husk"})
        async with rt.db.session() as s:
            await escalations.create(s, key, pk, 1, "husk", "Retry <b>with</b> guidance?", "fp")
        page = await http.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        html = page.text
        assert key in html and "escalated: husk" in html and "1/8" in html
        assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
        assert "Open escalations (1)" in html and "Retry &lt;b&gt;with&lt;/b&gt; guidance?" in html
