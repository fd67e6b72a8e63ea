"""Hypothesis strategies for hostile webhook payloads: GitHub's own examples with the fields the
routing reads replaced by values of any type, text no database takes (a NUL, a lone surrogate),
names past their columns' widths, deep nesting, huge integers and odd encodings.

Used by the routing's fuzz test (pure, many examples) and by the fuzz test of /webhook over HTTP.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from .openapi import webhook_examples

# Every event the routing handles, and two it only records.
EVENTS = (
    "pull_request", "pull_request_review", "pull_request_review_comment",
    "pull_request_review_thread", "issue_comment", "check_suite", "check_run", "status", "push",
    "ping", "installation",
)

# Bounded and repeatable: the same examples on every run (CI is not flaky), no example database
# written into the work tree, no deadline (a request's time depends on the machine).
FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# The fields the handler's readers use, by event; `{event}` stands for the check's own object.
PATHS: tuple[tuple[str, ...], ...] = (
    ("action",), ("repository",), ("repository", "full_name"), ("sender",), ("sender", "login"),
    ("pull_request",), ("pull_request", "number"), ("pull_request", "user"),
    ("pull_request", "user", "login"), ("pull_request", "head"), ("pull_request", "head", "sha"),
    ("label",), ("label", "name"), ("issue",), ("issue", "number"), ("issue", "pull_request"),
    ("comment",), ("comment", "id"), ("comment", "body"), ("comment", "user"),
    ("comment", "user", "type"), ("{event}",), ("{event}", "pull_requests"),
    ("{event}", "head_sha"), ("{event}", "app"), ("{event}", "app", "slug"), ("{event}", "name"),
    ("sha",), ("ref",), ("after",),
    # Read by the handler beside the routing: the installation map, a push's config change, and
    # a command's own comment.
    ("repository", "default_branch"), ("installation",), ("installation", "id"), ("commits",),
    ("comment", "user", "login"), ("comment", "created_at"), ("comment", "updated_at"),
)

NASTY_TEXT = (
    "\ud800", "\udfff", "\x00", "a\x00b", "o/r", "Octo/Repo", "o/r\x00", "o/\ud800", "x" * 65,
    "o/" + "r" * 400, "refs/heads/\ud800", "refs/heads/feature", "refs/heads/" + "b" * 400,
    "a" * 40, "/converge status", "convergebot[bot]", "convergebot", "opened", "labeled",
    "converge", "synchronize", "created", "Bot", "",
)
text = st.one_of(
    st.text(max_size=20),
    st.text(alphabet="\x00\ud800\udc00\u00e9/#aZ9-._ ", max_size=80),
    st.sampled_from(NASTY_TEXT),
)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 7, 2**31, 2**63 - 1, 2**63, 10**30, 10**299]),
    st.floats(allow_nan=True, allow_infinity=True),
)
leaf = st.one_of(st.none(), st.booleans(), numbers, text)
value = st.recursive(
    leaf, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)
# Many PRs named at once: past the fan-out cap as often as under it.
many_prs = st.integers(min_value=0, max_value=400).map(
    lambda n: [{"number": i + 1, "head": {"sha": "a" * 40}} for i in range(n)])


def _set(payload: dict[str, Any], path: tuple[str, ...], new: Any) -> None:
    """Put `new` at `path`, making the objects on the way; a non-object on the way stays."""
    node: Any = payload
    for name in path[:-1]:
        if not isinstance(node, dict):
            return
        node = node.setdefault(name, {})
    if isinstance(node, dict):
        node[path[-1]] = new


@st.composite
def payloads(draw, event: str) -> dict[str, Any]:
    """One of GitHub's examples for `event`, with up to six routed fields replaced."""
    payload = copy.deepcopy(draw(st.sampled_from(_examples(event))))
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        path = tuple(p.replace("{event}", event) for p in draw(st.sampled_from(PATHS)))
        new = draw(many_prs) if path[-1] == "pull_requests" and draw(st.booleans()) else draw(value)
        _set(payload, path, new)
    return payload


_EXAMPLES: dict[str, list[dict[str, Any]]] = {}


def _examples(event: str) -> list[dict[str, Any]]:
    if event not in _EXAMPLES:
        _EXAMPLES[event] = webhook_examples(event)
    return _EXAMPLES[event]


def encode(payload: Any, how: str) -> bytes:
    """`payload` as JSON bytes: UTF-8 (a lone surrogate as its `\\ud800` escape, or as the
    bytes no decoder takes), UTF-16 or UTF-32 (JSON's other encodings), or UTF-8 with a BOM."""
    if how == "escaped":
        return json.dumps(payload).encode()
    raw = json.dumps(payload, ensure_ascii=False)
    if how == "utf-8":
        return raw.encode("utf-8", "surrogatepass")
    if how == "utf-8-sig":
        return raw.encode("utf-8-sig", "surrogatepass")
    return raw.encode(how, "surrogatepass")


ENCODINGS = ("escaped", "utf-8", "utf-8-sig", "utf-16", "utf-32")


def nested(depth: int, opener: str) -> bytes:
    """An object whose `action` key sits beside JSON nested `depth` deep."""
    inner = ("[" * depth + "]" * depth) if opener == "[" else ('{"a":' * depth + "1" + "}" * depth)
    return ('{"action": "opened", "x": ' + inner + "}").encode()


@st.composite
def raw_bodies(draw) -> bytes:
    """Bodies that are no example at all: deep nesting, huge integers, bytes, big padding."""
    kind = draw(st.sampled_from(["deep", "digits", "binary", "padded", "scalar"]))
    if kind == "deep":
        return nested(draw(st.integers(min_value=1, max_value=20_000)), draw(st.sampled_from("[{")))
    if kind == "digits":
        return b'{"action": "opened", "n": ' + b"9" * draw(st.integers(min_value=1, max_value=10_000)) + b"}"
    if kind == "binary":
        return draw(st.binary(max_size=512))
    if kind == "padded":
        size = draw(st.integers(min_value=0, max_value=300_000))
        return json.dumps({"action": "opened", "pad": "x" * size}).encode()
    return draw(st.sampled_from([b"null", b"1", b'"x"', b"[]", b"", b"{", b'{"action": "\\ud800"}']))
