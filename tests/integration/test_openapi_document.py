"""/api/openapi.json: a valid OpenAPI document that describes every API route, and the
answers the real server gives match its schemas (the detail, the list, the errors)."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
from openapi_spec_validator import validate

from bot.surfaces.web.app import build_app

from ..serving import make_config, serving
from .test_cli import convergebot
from .test_dashboard import KEY, OTHER, seed


def _validator(doc: dict, schema: dict) -> jsonschema.Draft202012Validator:
    """A validator for one of the document's schemas, its `#/components/...` refs resolving
    within the document."""
    return jsonschema.Draft202012Validator({**schema, "components": doc["components"]})


def _response_schema(doc: dict, path: str, method: str, status: int) -> dict:
    return doc["paths"][path][method]["responses"][str(status)]["content"]["application/json"]["schema"]


async def test_the_document_is_valid_and_covers_every_api_route(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        r = await http.get("/api/openapi.json")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        doc = r.json()
    validate(doc)
    assert doc["openapi"].startswith("3.")
    routes = {(route.path, m.lower()) for route in build_app(rt).routes if route.path.startswith("/api/")
              for m in route.methods - {"HEAD"}}
    documented = {(p, m) for p, item in doc["paths"].items() for m in item if m != "parameters"}
    assert routes == documented
    post = doc["paths"]["/api/prs"]["post"]
    assert post["security"] == [{"bearer": []}] and {"201", "200", "400", "401"} <= set(post["responses"])
    assert {"200", "400", "404"} <= set(doc["paths"]["/api/prs/{owner}/{repo}/{number}"]["get"]["responses"])


async def test_real_answers_match_the_documented_schemas(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        ids = await seed(rt.db)
        doc = (await http.get("/api/openapi.json")).json()
        detail = (await http.get("/api/prs/octo/repo/9")).json()
        listed = (await http.get("/api/prs")).json()
        missing = await http.get("/api/prs/octo/repo/404")
        malformed = await http.get("/api/prs/a/b/x")
        refused = await http.post("/api/prs", json={"pr": "octo/repo#3"})
    one = "/api/prs/{owner}/{repo}/{number}"
    _validator(doc, _response_schema(doc, one, "get", 200)).validate(detail)
    _validator(doc, _response_schema(doc, "/api/prs", "get", 200)).validate(listed)
    _validator(doc, _response_schema(doc, one, "get", 404)).validate(missing.json())
    _validator(doc, _response_schema(doc, one, "get", 400)).validate(malformed.json())
    _validator(doc, _response_schema(doc, "/api/prs", "post", 401)).validate(refused.json())
    assert sorted(p["pr_key"] for p in listed) == sorted([KEY, OTHER])
    assert "rounds" not in listed[0], "the list keeps the summary shape"
    # The detail carries what the schema promises, with the seeded content.
    assert [(r["round"], r["status"], r["attempts"], r["reruns"], r["replies"]["count"]) for r in detail["rounds"]] \
        == [(1, "fixed", 2, 1, 1), (2, "in progress", 0, 0, 0)]
    assert detail["rounds"][0]["findings"][0]["path"] == "w/stats.py"
    answered = next(e for e in detail["escalations"] if e["id"] == ids["answered"])
    assert answered["comment_url"] == "https://github.com/octo/repo/pull/9#issuecomment-5551"
    assert answered["answer_url"] == "https://github.com/octo/repo/pull/9#issuecomment-7771"
    assert answered["answered"] and answered["answered_by"] == "alice"
    assert [e["status"] for e in detail["escalations"]] == ["answered", "open"]
    assert sorted(e["effect"] for e in detail["effects"]) == ["comment", "reply", "request_review"]
    assert [e["dry_run"] for e in detail["effects"] if e["effect"] == "request_review"] == [True]
    # The seeded sync, and maybe one the server's poller queued meanwhile for the active PR.
    assert {j["kind"] for j in detail["jobs"]} == {"sync"}
    assert detail["effect_budget"]["writes_per_hour"] == 400


async def test_a_schema_drift_is_caught(db_url):
    # The schemas are closed: a field the document does not describe fails validation.
    async with serving(make_config(db_url)) as (rt, http):
        await seed(rt.db)
        doc = (await http.get("/api/openapi.json")).json()
        detail = (await http.get("/api/prs/octo/repo/9")).json()
    schema = _response_schema(doc, "/api/prs/{owner}/{repo}/{number}", "get", 200)
    with pytest.raises(jsonschema.ValidationError, match="undocumented"):
        _validator(doc, schema).validate({**detail, "undocumented": 1})


async def test_status_json_of_one_pr_is_the_api_detail(db_url):
    # `convergebot status --json owner/repo#N` and GET /api/prs/{owner}/{repo}/{number} answer
    # one shape, the documented one.
    async with serving(make_config(db_url)) as (rt, http):
        await seed(rt.db)
        doc = (await http.get("/api/openapi.json")).json()
        api = (await http.get("/api/prs/octo/repo/9")).json()
        cli = await asyncio.to_thread(convergebot, db_url, "status", KEY, "--json")
    assert cli.returncode == 0, cli.stderr
    detail = json.loads(cli.stdout)
    _validator(doc, _response_schema(doc, "/api/prs/{owner}/{repo}/{number}", "get", 200)).validate(detail)
    # Equal but for the budget's window start, which each reader takes from its own clock, and
    # the seeded sync job's progress: the running server's poller may pull it forward and a
    # worker try it (against no GitHub) between the two reads.
    def steady(d: dict) -> dict:
        return {**d, "effect_budget": None, "jobs": [(j["id"], j["kind"]) for j in d["jobs"]]}

    assert steady(detail) == steady(api)
    assert len(detail["rounds"]) == 2 and len(detail["escalations"]) == 2
