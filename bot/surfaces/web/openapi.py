"""/api/openapi.json: the API described as OpenAPI 3.1, kept next to the handlers it describes.

The response schemas are closed (`additionalProperties: false`): a field added to `pr_json` or
`pr_detail` without being described here fails the tests that validate real answers against
this document.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from bot import __version__
from bot.rules.model import MAX_ROUNDS
from bot.rules.waiting import KINDS
from storage.dependencies import SOURCES


def _nullable(type_: str, **kw: Any) -> dict:
    return {"type": [type_, "null"], **kw}


TIME = _nullable("string", format="date-time")
STR = _nullable("string")
INT = _nullable("integer")


def _obj(props: dict[str, Any], *, description: str | None = None) -> dict:
    out: dict[str, Any] = {"type": "object", "required": sorted(props), "properties": props,
                           "additionalProperties": False}
    if description:
        out["description"] = description
    return out


SUMMARY = {
    "pr_key": {"type": "string", "examples": ["octo-org/widgets#12"]},
    "title": {"type": "string"},
    "url": {"type": "string"},
    "status": {"type": "string", "description": "What the PR is, its run taken into account "
                                                "(an ended run reads `abandoned`)."},
    "stored_status": {"type": "string"},
    "round": {"type": "integer"},
    "max_rounds": {"type": "integer"},
    "process_key": STR,
    "run_state": STR,
    "converge_only": {"type": "boolean"},
    "head_sha": STR,
    "latest_review_id": INT,
    "gh_state": STR,
    "outcome": STR,
    "depends_on": {"type": "array", "items": {"type": "string"},
                   "description": "The PRs it waits for before it merges: its body's `Depends-on:` lines, "
                                  "those given at enrollment, and the PR whose branch it is based on."},
    "dependency_sources": {"type": "object",
                           "additionalProperties": {"type": "array", "items": {"type": "string", "enum": list(SOURCES)}},
                           "description": "Where each of `depends_on` was given: `body` (a `Depends-on:` line, "
                                          "re-read with the body), `explicit` (at enrollment, kept), `stack` (its "
                                          "base branch is that PR's head branch), or more than one.",
                           "examples": [{"octo-org/widgets#11": ["explicit"]}]},
    "unmerged_deps": {"type": "array", "items": {"type": "string"}},
    "stack": {"type": "array", "items": {"type": "string"},
              "description": "The stack of PRs it is in (each based on the branch of the one before), "
                             "bottom-up, itself among them: the order they land in. Empty when it is in none.",
              "examples": [["octo-org/widgets#11", "octo-org/widgets#12", "octo-org/widgets#14"]]},
    "synced_at": TIME,
    "updated_at": TIME,
    "converged_at": TIME,
    "merged_at": TIME,
    "waiting_on": _nullable("string", description="Who or what an active PR waits on: `kind: who` (a reviewer's "
                                                  "login, a check's name, a dependency), or the kind alone; null "
                                                  "once finished.", examples=["check: ci/test"]),
    "waiting_kind": {"type": ["string", "null"], "enum": [*KINDS, None],
                     "description": "The kind of the wait (the `convergebot_oldest_wait_seconds` label)."},
    "waiting_since": _nullable("string", format="date-time", description="Since when it has waited so."),
}

FINDING = _obj({"body": {"type": "string"}, "path": STR, "line": INT, "author": STR})

AGENT = _obj({
    "attempts": {"type": "integer", "description": "Runs of the fixer's agent."},
    "cost_usd": _nullable("number", description="Dollars, as the CLI reported them or its tokens at "
                                                "`[fixer]` prices; null when none is known."),
    "cost_known": {"type": "boolean", "description": "Every attempt's cost is known."},
    "input_tokens": {"type": "integer"},
    "output_tokens": {"type": "integer"},
    "seconds": {"type": "number", "description": "Wall time of the attempts."},
    "failures": {"type": "array", "items": {"type": "string"},
                 "description": "What the CLI said went wrong in attempts that changed nothing, last first."},
}, description="What the fixer's agent spent.")

ROUND = _obj({
    "round": {"type": "integer"},
    "kind": {"type": "string", "enum": ["review", "conflict", "ci"]},
    "status": {"type": "string", "description": "The round's result, or `in progress`."},
    "in_progress": {"type": "boolean"},
    "entry_head": STR,
    "exit_head": STR,
    "review_id": INT,
    "findings_count": {"type": "integer"},
    "findings": {"type": "array", "items": {"$ref": "#/components/schemas/Finding"}},
    "summary": STR,
    "fixer": STR,
    "verdict": STR,
    "question": STR,
    "attempts": {"type": "integer", "description": "Fixer dispatches of the round."},
    "reruns": {"type": "integer", "description": "Dispatches after the first (husks, retries, answers)."},
    "replies": _obj({"count": {"type": "integer"}, "states": {"type": "array", "items": {"type": "string"}}}),
    "started_at": TIME,
    "ended_at": TIME,
    "fixer_started_at": TIME,
    "fixer_finished_at": TIME,
    "agent": {"$ref": "#/components/schemas/AgentSpend"},
})

ESCALATION = _obj({
    "id": {"type": "integer"},
    "kind": {"type": "string"},
    "round": {"type": "integer"},
    "status": {"type": "string", "enum": ["open", "answered", "stale"]},
    "question": {"type": "string", "description": "Markdown."},
    "asked_at": TIME,
    "answered": {"type": "boolean"},
    "answer": STR,
    "answered_by": STR,
    "answered_at": TIME,
    "comment_id": INT,
    "comment_url": _nullable("string", description="The escalation's comment on GitHub."),
    "answer_comment_id": INT,
    "answer_url": _nullable("string", description="The maintainer's answering comment on GitHub "
                                                  "(null when answered from the CLI)."),
})

RUN = _obj({"process_key": {"type": "string"}, "kind": {"type": "string"}, "state": {"type": "string"},
            "reason": STR, "started_at": TIME, "ended_at": TIME})

JOB_FIELDS = {"id": {"type": "integer"}, "kind": {"type": "string"},
              "status": {"type": "string", "description": "queued, running, done, failed, dropped, or a "
                                                          "newer state, given as stored."},
              "round": INT, "attempts": {"type": "integer"}, "max_attempts": {"type": "integer"},
              "created_at": TIME, "run_at": TIME, "finished_at": TIME,
              "last_error": _nullable("string", description="Why the last try failed: its kind and a short "
                                      "message, without tokens, credentials in URLs or the server's paths "
                                      "(the log has the whole text).")}
JOB = _obj(JOB_FIELDS)
EFFECT = _obj({**JOB_FIELDS, "effect": {"type": "string"},
               "dry_run": {"type": "boolean", "description": "Recorded in a dry run, not performed."},
               "escalation_id": INT})

BUDGET = _obj({"since": TIME, "writes": {"type": "integer"}, "comments": {"type": "integer"},
               "writes_per_hour": INT, "comments_per_hour": INT, "paused": {"type": "boolean"}},
              description="The PR's GitHub writes and comments counted against `[budget]`.")


def _array(ref: str) -> dict:
    return {"type": "array", "items": {"$ref": f"#/components/schemas/{ref}"}}


DETAIL = _obj({
    **SUMMARY,
    "author": STR, "head_branch": STR, "last_action": STR, "escalated_at": TIME,
    "abandon_reason": STR, "run_reason": STR,
    "rounds": _array("Round"),
    "escalations": _array("Escalation"),
    "runs": _array("Run"),
    "jobs": _array("Job"),
    "jobs_total": {"type": "integer"},
    "effects": _array("Effect"),
    "effects_total": {"type": "integer"},
    "effect_budget": {"$ref": "#/components/schemas/EffectBudget"},
    "agent": {"$ref": "#/components/schemas/AgentSpend"},
}, description="A PR's full detail: the summary fields plus its current run's rounds, its "
               "escalations, runs, newest jobs and effects, and its write budget.")

ERROR = _obj({"error": {"type": "string", "description": "One line saying what was wrong."}})


def _json(ref: str, description: str) -> dict:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}


PR_PARAMS = [
    {"name": "owner", "in": "path", "required": True, "schema": {"type": "string"}},
    {"name": "repo", "in": "path", "required": True, "schema": {"type": "string"}},
    {"name": "number", "in": "path", "required": True,
     "schema": {"type": "string", "description": "The PR number, from 1; anything else is a 400."}},
]

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "convergebot API", "version": __version__,
             "description": "The PRs convergebot is converging: read them, and enroll one."},
    "paths": {
        "/api/prs": {
            "get": {
                "operationId": "listPrs",
                "summary": "A page of enrolled PRs, in the summary shape (no rounds or escalations: "
                           "ask a PR's own URL for those). By default the working set: every PR not "
                           "finished, and those finished within 7 days.",
                "parameters": [
                    {"name": "scope", "in": "query", "schema": {"type": "string", "enum": ["current", "all"],
                                                                "default": "current"},
                     "description": "`current`: the working set; `all`: every PR ever enrolled."},
                    {"name": "status", "in": "query", "schema": {"type": "string"},
                     "description": "Only PRs shown with this status (`status` of the summary)."},
                    {"name": "repo", "in": "query", "schema": {"type": "string"},
                     "description": "Only PRs of this repository (`owner/name`, any case)."},
                    {"name": "limit", "in": "query",
                     "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}},
                    {"name": "cursor", "in": "query", "schema": {"type": "string"},
                     "description": "Where the page starts: pass back the one the `Link` header of "
                                    "the previous page named."},
                ],
                "responses": {
                    "200": {"description": "The page's PRs, oldest enrolled first.",
                            "headers": {
                                "Link": {"schema": {"type": "string"},
                                         "description": "`<URL>; rel=\"next\"`: the next page, while there is one."},
                                "X-Total-Count": {"schema": {"type": "integer"},
                                                  "description": "How many PRs the filters match."}},
                            "content": {"application/json": {"schema": _array("PrSummary")}}},
                    "400": _json("Error", "A parameter this API cannot answer (the error says which)."),
                },
            },
            "post": {
                "operationId": "enrollPr",
                "summary": "Enroll a PR (or resubmit one whose run ended), as `convergebot submit` does.",
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Submission"}}}},
                "responses": {
                    "201": _json("SubmissionResult", "A run was started."),
                    "200": _json("SubmissionResult", "A run is already going; nothing changed."),
                    "400": _json("Error", "The body is not a valid submission (the error names a malformed "
                                           "key or dependency, or a PR depending on itself); nothing changed."),
                    "401": _json("Error", "No bearer token, or not `server.api_token`."),
                },
            },
        },
        "/api/prs/{owner}/{repo}/{number}": {
            "parameters": PR_PARAMS,
            "get": {
                "operationId": "getPr",
                "summary": "One PR's full detail, read from the database only.",
                "responses": {
                    "200": _json("PrDetail", "The PR's detail."),
                    "400": _json("Error", "Not a well-formed owner/repo/number."),
                    "404": _json("Error", "The PR is not enrolled."),
                },
            },
        },
        "/api/openapi.json": {
            "get": {"operationId": "openapi", "summary": "This document.",
                    "responses": {"200": {"description": "OpenAPI 3.1",
                                          "content": {"application/json": {"schema": {"type": "object"}}}}}},
        },
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                       "description": "`server.api_token` from the configuration."}},
        "schemas": {
            "PrSummary": _obj(SUMMARY, description="A PR as the list and `status --json` show it."),
            "PrDetail": DETAIL,
            "Finding": FINDING,
            "Round": ROUND,
            "Escalation": ESCALATION,
            "Run": RUN,
            "Job": JOB,
            "Effect": EFFECT,
            "EffectBudget": BUDGET,
            "AgentSpend": AGENT,
            "Submission": {"type": "object", "required": ["pr"], "additionalProperties": False, "properties": {
                "pr": {"type": "string", "description": "owner/repo#N or the PR's URL"},
                "max_rounds": {"type": "integer", "minimum": 1, "maximum": MAX_ROUNDS},
                "no_merge": {"type": "boolean"},
                "depends_on": {"type": "array", "items": {"type": "string"},
                               "description": "PRs to merge first, as `owner/repo#N` or `#N` (in the PR's "
                                              "repository), joined with the body's `Depends-on:` lines and "
                                              "kept through edits of the body. Recorded only when a run "
                                              "starts."},
                "stack": {"type": "boolean", "default": False,
                          "description": "Enroll the PRs it is stacked on too (its base branch's PR, that one's, "
                                         "and so on), with the same options: the stack lands bottom-up."}}},
            "SubmissionResult": _obj({"pr_key": {"type": "string"},
                                      "outcome": {"type": "string", "enum": ["started", "already_running"]},
                                      "process_key": STR}),
            "Error": ERROR,
        },
    },
}


async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(DOCUMENT)
