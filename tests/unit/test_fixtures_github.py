"""The GitHub fixtures (tests/fixtures/) and the tests/openapi.py helper that reads them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tests import openapi
from tests.openapi import (
    assert_matches,
    load_operations,
    load_subset,
    response_examples,
    schema_for,
    webhook_examples,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "refresh-github-fixtures.py"

PULL = "GET /repos/{owner}/{repo}/pulls/{pull_number}"
ACTIONLESS_EVENTS = {"status", "push", "ping"}

# GitHub's own example responses that its own schemas reject (the examples predate the
# schema change). Each is the exact set of (JSON path, message) the validator reports; if the
# spec is fixed or drifts further, the test below says so and this table must be updated.
TEAM_TYPE = "'type' is a required property"
KNOWN_EXAMPLE_DRIFT = {
    ("GET /repos/{owner}/{repo}", "default-response"): {
        ("$", "'language' is a required property"),
        ("$.source", "'language' is a required property"),
    },
    ("GET /repos/{owner}/{repo}/pulls", "default"): {("$[0].requested_teams[0]", TEAM_TYPE)},
    (PULL, "default"): {("$.requested_teams[0]", TEAM_TYPE)},
    ("GET /repos/{owner}/{repo}/collaborators/{username}/permission",
     "response-if-user-has-admin-permissions"): {("$.user", "'role_name' is a required property")},
    ("POST /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers", "default"): {
        ("$.requested_teams[0]", TEAM_TYPE),
    },
    ("GET /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers", "default"): {
        ("$.teams[0]", TEAM_TYPE),
    },
    # The example of a 202 with an empty object as its body is null.
    ("POST /app/hook/deliveries/{delivery_id}/attempts", "default"): {("$", "None is not of type 'object'")},
    ("POST /repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts", "default"): {
        ("$", "None is not of type 'object'"),
    },
    ("POST /orgs/{org}/hooks/{hook_id}/deliveries/{delivery_id}/attempts", "default"): {
        ("$", "None is not of type 'object'"),
    },
}


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("refresh_github_fixtures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def _all_examples():
    return [(op, name) for op, entry in load_operations().items() for name in entry["examples"]]


def _schema_keywords(schema, found: set[str]) -> set[str]:
    """Every keyword used anywhere in a schema (property names are not keywords)."""
    if isinstance(schema, list):
        for sub in schema:
            _schema_keywords(sub, found)
    elif isinstance(schema, dict):
        for key, value in schema.items():
            found.add(key)
            if key in ("properties", "patternProperties", "$defs"):
                for sub in value.values():
                    _schema_keywords(sub, found)
            elif key not in ("enum", "const", "default", "example", "examples", "required"):
                _schema_keywords(value, found)
    return found


# --- the OpenAPI subset ---------------------------------------------------------------------

def test_subset_comes_from_the_pinned_package(script):
    source = load_subset()["source"]
    assert source["package"] == script.OPENAPI_PKG["name"] == "@octokit/openapi"
    assert source["version"] == script.OPENAPI_PKG["version"]
    assert load_subset()["dialect"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_listed_operation_is_in_the_subset(script):
    assert load_subset()["missing_operations"] == []
    assert list(load_operations()) == script.OPERATIONS


@pytest.mark.parametrize("operation", openapi.operation_names())
def test_operation_has_a_valid_self_contained_schema(operation):
    entry = load_operations()[operation]
    assert 200 <= entry["status"] < 300
    assert entry["media_type"] == "application/json"
    schema = entry["schema"]
    assert isinstance(schema, dict) and schema
    assert {"type", "anyOf", "oneOf", "allOf"} & set(schema), schema.keys()
    Draft202012Validator.check_schema(schema)
    keywords = _schema_keywords(schema, set())
    assert "$ref" not in keywords, "every $ref must be inlined"
    assert "nullable" not in keywords, "OpenAPI `nullable` must be converted to a null union"


def test_subset_file_is_small_enough():
    assert openapi.SUBSET_PATH.stat().st_size < 3 * 1024 * 1024


@pytest.mark.parametrize("operation,example", _all_examples())
def test_spec_examples_match_their_schema_except_known_drift(operation, example):
    body = response_examples(operation)[example]
    validator = Draft202012Validator(schema_for(operation))
    errors = {(e.json_path, e.message) for e in validator.iter_errors(body)}
    assert errors == KNOWN_EXAMPLE_DRIFT.get((operation, example), set())
    if not errors:
        assert_matches(operation, body)
    else:
        with pytest.raises(AssertionError):
            assert_matches(operation, body)


def test_known_drift_table_has_no_stale_entries():
    assert set(KNOWN_EXAMPLE_DRIFT) <= set(_all_examples())


def test_accepts_the_specs_pull_request_example():
    body = response_examples(PULL)["default"]
    for team in body["requested_teams"]:  # the one field the example predates
        team.setdefault("type", "organization")
    assert_matches(PULL, body)
    assert_matches("get  /repos/{owner}/{repo}/pulls/{pull_number} ", body)  # normalized name


def test_accepts_the_specs_check_run_and_comment_examples():
    for operation in ("GET /repos/{owner}/{repo}/commits/{ref}/check-runs",
                      "POST /repos/{owner}/{repo}/check-runs",
                      "GET /repos/{owner}/{repo}/pulls/{pull_number}/comments",
                      "POST /repos/{owner}/{repo}/issues/{issue_number}/comments",
                      "GET /repos/{owner}/{repo}/commits/{ref}/status",
                      "PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge",
                      "GET /rate_limit"):
        for body in response_examples(operation).values():
            assert_matches(operation, body)


def test_rejects_an_obviously_wrong_body():
    with pytest.raises(AssertionError) as info:
        assert_matches(PULL, {"number": "x"})
    message = str(info.value)
    assert PULL in message
    assert "$.number: 'x' is not of type 'integer'" in message
    assert "missing required" in message
    with pytest.raises(AssertionError, match=r"\$: .* is not of type 'array'"):
        assert_matches("GET /repos/{owner}/{repo}/pulls", {"number": 1})


def test_rejects_a_wrong_nested_value_with_its_path():
    body = response_examples(PULL)["default"]
    for team in body["requested_teams"]:
        team.setdefault("type", "organization")
    body["head"]["sha"] = 1234
    body["state"] = "merged"  # the enum is open/closed
    with pytest.raises(AssertionError) as info:
        assert_matches(PULL, body)
    message = str(info.value)
    assert "$.head.sha: 1234 is not of type 'string'" in message
    assert "$.state: 'merged' is not one of" in message


def test_nullable_fields_accept_null_and_only_null():
    body = response_examples(PULL)["default"]
    for team in body["requested_teams"]:
        team.setdefault("type", "organization")
    body.update(merged_by=None, milestone=None, closed_at=None, merged_at=None, body=None,
                assignee=None)
    assert_matches(PULL, body)
    body["merged_by"] = 5
    with pytest.raises(AssertionError, match=r"\$\.merged_by"):
        assert_matches(PULL, body)
    with pytest.raises(AssertionError, match=r"\$\.number"):
        assert_matches(PULL, {**body, "merged_by": None, "number": None})


def test_the_error_list_is_capped():
    with pytest.raises(AssertionError) as info:
        assert_matches("GET /repos/{owner}/{repo}/pulls", [{"number": "x"}, {"id": "y"}, 3, 4, 5,
                                                           6, 7], max_errors=3)
    assert "... and" in str(info.value)
    assert len(str(info.value).splitlines()) == 1 + 3 + 1


def test_status_picks_among_success_responses():
    op = "POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"
    assert load_operations()[op]["success_statuses"] == [200, 201]
    body = response_examples(op)["default"]
    assert_matches(op, body, status=200)
    assert_matches(op, body, status=201)
    with pytest.raises(KeyError, match="404"):
        assert_matches(op, body, status=404)


def test_unknown_operation_is_a_clear_error():
    with pytest.raises(KeyError, match="not in github-openapi-subset.json"):
        assert_matches("GET /nope", {})


def test_contents_accepts_file_and_directory_bodies():
    op = "GET /repos/{owner}/{repo}/contents/{path}"
    examples = response_examples(op)
    assert isinstance(examples["response-if-content-is-a-directory"], list)
    assert examples["response-if-content-is-a-file"]["type"] == "file"
    with pytest.raises(AssertionError, match="not valid under any of the given schemas"):
        assert_matches(op, {"type": "file"})


def test_helpers_hand_out_copies():
    schema_for(PULL)["type"] = "string"
    response_examples(PULL)["default"]["number"] = "x"
    assert load_operations()[PULL]["schema"]["type"] == "object"
    assert isinstance(response_examples(PULL)["default"]["number"], int)


# --- webhook examples -----------------------------------------------------------------------

def test_webhook_source_records_the_pinned_package(script):
    source = (openapi.WEBHOOKS_DIR / "SOURCE.md").read_text(encoding="utf-8")
    assert script.WEBHOOKS_PKG["name"] in source
    assert f"Version: {script.WEBHOOKS_PKG['version']}" in source
    assert openapi.webhook_events() == sorted(script.EVENTS)


@pytest.mark.parametrize("event", [
    "pull_request", "pull_request_review", "pull_request_review_comment",
    "pull_request_review_thread", "issue_comment", "check_suite", "check_run", "status",
    "push", "ping", "installation", "installation_repositories",
])
def test_every_event_has_examples(event):
    payloads = webhook_examples(event)
    assert payloads and all(isinstance(p, dict) for p in payloads)
    if event in ACTIONLESS_EVENTS:
        assert all("action" not in p for p in payloads)
    else:
        assert all(isinstance(p.get("action"), str) for p in payloads)
    if event != "ping":  # ping is sent when a hook is created, before any repository event
        assert all("repository" in p or "installation" in p for p in payloads)


def test_webhook_examples_filter_by_action_and_copy():
    opened = webhook_examples("pull_request", action="opened")
    assert opened and all(p["action"] == "opened" for p in opened)
    assert {"synchronize", "closed", "ready_for_review"} <= {
        p["action"] for p in webhook_examples("pull_request")}
    opened[0]["action"] = "mutated"
    assert webhook_examples("pull_request", action="opened")[0]["action"] == "opened"
    assert webhook_examples("pull_request", action="no-such-action") == []
    with pytest.raises(KeyError, match="no webhook examples"):
        webhook_examples("no_such_event")


def test_webhook_files_are_plain_json_lists():
    for path in openapi.WEBHOOKS_DIR.glob("*.json"):
        assert isinstance(json.loads(path.read_text(encoding="utf-8")), list), path.name


# --- the generator's conversions (no network) -----------------------------------------------

def test_resolver_inlines_refs_and_cuts_cycles(script):
    doc = {"components": {"schemas": {
        "node": {"type": "object", "properties": {
            "child": {"$ref": "#/components/schemas/node"},
            "owner": {"$ref": "#/components/schemas/user"},
        }},
        "user": {"type": "object", "properties": {"login": {"type": "string"}}},
    }}}
    resolver = script.Resolver(doc)
    out = resolver.resolve({"$ref": "#/components/schemas/node"})
    assert out["properties"]["owner"]["properties"]["login"] == {"type": "string"}
    assert "$ref" not in json.dumps(out)
    assert set(out["properties"]["child"]) == {"$comment"}  # accepts anything
    assert resolver.cut == {"#/components/schemas/node"}


def test_nullable_conversion(script):
    convert = script.to_json_schema
    assert convert({"type": "string", "nullable": True}) == {"type": ["string", "null"]}
    assert convert({"type": "string", "enum": ["a"], "nullable": True}) == {
        "type": ["string", "null"], "enum": ["a", None]}
    wrapped = convert({"nullable": True, "title": "T", "allOf": [{"type": "object"}]})
    assert wrapped == {"title": "T", "anyOf": [{"type": "null"}, {"allOf": [{"type": "object"}]}]}
    assert convert({"nullable": True}) == {}
    nested = convert({"type": "object", "properties": {
        "nullable": {"type": "integer", "nullable": True}}})
    assert nested == {"type": "object", "properties": {"nullable": {"type": ["integer", "null"]}}}
    assert convert({"type": "object", "discriminator": {}, "x-github": {}}) == {"type": "object"}


def test_strip_docs_keeps_properties_named_like_keywords(script):
    schema = {"type": "object", "description": "d", "example": {}, "properties": {
        "description": {"type": "string", "description": "the repo description"},
        "examples": {"type": "array", "items": {"type": "string", "example": "x"}},
    }}
    assert script.strip_docs(schema) == {"type": "object", "properties": {
        "description": {"type": "string"},
        "examples": {"type": "array", "items": {"type": "string"}},
    }}
