"""The webhook body's parsers. `parse`: msgspec for speed, the standard library for what msgspec
refuses, so every body parses (or fails) exactly as `json.loads` alone would have it.
`parse_read`: only the fields some reader uses, from which the readers decide what they decide
from the whole payload; and every field a reader uses is one it keeps."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.engine import repoconfig
from bot.github.installations import learn_from_payload
from bot.intake.routing import PAYLOAD_READ, EnrollRules, route
from bot.intake.webhook import parse, parse_read

from ..hostile import ENCODINGS, EVENTS, FUZZ, encode, nested, payloads, raw_bodies
from ..openapi import webhook_examples


def _outcome(fn, body: bytes):
    try:
        return "parsed", fn(body)
    except RecursionError:
        return "too deep", None
    except ValueError:
        return "refused", None


def _same(a, b) -> bool:
    """Equal, with NaN equal to itself (JSON's `NaN` parses to a float that is not)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@FUZZ
@given(event=st.sampled_from(EVENTS), data=st.data(), how=st.sampled_from(ENCODINGS))
def test_a_hostile_payload_parses_as_the_standard_library_parses_it(event, data, how):
    body = encode(data.draw(payloads(event)), how)
    got, want = _outcome(parse, body), _outcome(json.loads, body)
    assert got[0] == want[0] and _same(got[1], want[1]), (how, body[:200])


@FUZZ
@given(body=raw_bodies())
def test_a_body_that_is_no_example_parses_or_fails_as_before(body):
    got, want = _outcome(parse, body), _outcome(json.loads, body)
    assert got[0] == want[0] and _same(got[1], want[1]), body[:200]


@pytest.mark.parametrize("body", [
    '{"action": "opened"}'.encode("utf-16"),  # JSON's other encodings
    '{"action": "opened"}'.encode("utf-8-sig"),
    b'{"x": NaN}',
    b'{"x": 1e400}',  # infinity
    b'{"action": "\\ud800"}',  # a lone surrogate escape
    b'{"action": "\xed\xa0\x80"}',  # a lone surrogate as raw bytes
])
def test_what_msgspec_refuses_is_still_parsed(body):
    with pytest.raises(msgspec.MsgspecError):
        msgspec.json.decode(body)
    assert _same(parse(body), json.loads(body))


@pytest.mark.parametrize("body", [
    b'{"n": ' + b"9" * 5_000 + b"}",  # past the 4,300 digits Python converts
    b'{"a": 1} x',
    b'{"a": "\xff"}',
    nested(5_000, "{"),
])
def test_what_neither_takes_is_refused(body):
    assert _outcome(parse, body)[0] in ("refused", "too deep")
    assert _outcome(parse, body)[0] == _outcome(json.loads, body)[0]


def test_a_long_integer_stays_an_exact_integer():
    assert parse(b'{"n": ' + b"9" * 30 + b"}") == {"n": int("9" * 30)}


# --- parse_read: only the fields some reader uses ------------------------------------------------

RULES = EnrollRules("converge", frozenset({"alice", "codertocat", "octocat"}), bot_login="convergebot[bot]",
                    own_pushes=frozenset({("codertocat/hello-world", "ec26c3e57ca3a959ca5aad62de7213c562f8c821")}),
                    max_prs=100)
# GitHub publishes no merge_group example: one of the shape its docs give.
MERGE_GROUP = {"action": "checks_requested", "repository": {"full_name": "o/r", "default_branch": "main"},
               "merge_group": {"head_sha": "c" * 40, "base_ref": "refs/heads/main",
                               "head_ref": "refs/heads/gh-readonly-queue/main/pr-7-" + "c" * 40},
               "installation": {"id": 5}, "sender": {"login": "alice"}}
ALL_EVENTS = (*EVENTS, "merge_group")


class _Learned:
    """What `learn_from_payload` tells an App's installation map (a recorder, not GitHub)."""

    per_installation = True

    def __init__(self) -> None:
        self.installations = self
        self.learned: list[tuple[str, int]] = []

    def learn(self, name: str, found: int) -> None:
        self.learned.append((name, found))


def _decided(event: str, payload: Any, rules: EnrollRules = RULES) -> str:
    """Everything the handler decides from a parsed payload, as comparable text."""
    if not isinstance(payload, dict):
        return "not an object"
    learned = _Learned()
    learn_from_payload(learned, payload)
    routed = route(event, payload, "d1", rules)
    return json.dumps([payload.get("action"), learned.learned, repoconfig.touched(payload),
                       dataclasses.asdict(routed)], sort_keys=True, default=repr)


def _read_and_whole(event: str, body: bytes) -> tuple[tuple[str, str | None], tuple[str, str | None]]:
    def decided(fn):
        outcome, payload = _outcome(fn, body)
        return outcome, (_decided(event, payload) if outcome == "parsed" else None)

    return decided(parse_read), decided(parse)


def _payloads(event: str) -> st.SearchStrategy[dict]:
    return st.just(copy.deepcopy(MERGE_GROUP)) if event == "merge_group" else payloads(event)


def _examples() -> list[tuple[str, dict]]:
    """Every example of every event, and each push example once more as a push to its default
    branch that changes the repository's convergebot.toml."""
    found = [(event, example) for event in EVENTS for example in webhook_examples(event)]
    found.append(("merge_group", copy.deepcopy(MERGE_GROUP)))
    for example in webhook_examples("push"):
        example["ref"] = f"refs/heads/{example['repository']['default_branch']}"
        example["commits"] = [{"id": "1", "added": [], "modified": [repoconfig.PATH], "removed": []}]
        found.append(("push", example))
    return found


def _pushed(payload: dict) -> tuple[str, str] | None:
    sha = payload.get("after") or payload.get("pull_request", {}).get("head", {}).get("sha")
    return (payload["repository"]["full_name"].lower(), sha) if sha and "repository" in payload else None


@pytest.mark.parametrize("echoes", [False, True], ids=["news", "echoes"])
def test_the_readers_decide_the_same_from_the_fields_read_of_every_example(echoes):
    """`echoes`: with the bot's login as every sender and every pushed head one of ours."""
    examples = _examples()
    rules = RULES
    if echoes:
        rules = EnrollRules(RULES.label, RULES.authors, bot_login="codertocat",
                            own_pushes=frozenset(filter(None, (_pushed(p) for _, p in examples))))
    decisions = set()
    for event, example in examples:
        body = json.dumps(example).encode()
        read, whole = _decided(event, parse_read(body), rules), _decided(event, parse(body), rules)
        assert read == whole, (event, example.get("action"))
        decisions.add(read)
    assert len(decisions) > 40  # the examples reach many decisions, not one


@FUZZ
@given(event=st.sampled_from(ALL_EVENTS), data=st.data(), how=st.sampled_from(ENCODINGS))
def test_the_readers_decide_the_same_from_the_fields_read_as_from_the_whole_payload(event, data, how):
    body = encode(data.draw(_payloads(event)), how)
    read, whole = _read_and_whole(event, body)
    assert read == whole, (how, body[:300])


@FUZZ
@given(body=raw_bodies())
def test_a_body_that_is_no_example_is_read_or_refused_as_the_whole_parse_does(body):
    read, whole = _read_and_whole("pull_request", body)
    if read != whole:  # the one difference: a huge integer in a field no reader uses is skipped
        assert whole[0] == "refused" and read[0] == "parsed" and b"9" * 4301 in body, body[:200]


@pytest.mark.parametrize("value", [
    b"01", b"1.", b".5", b"+1", b"1e", b"-", b"-0", b"1E+2", b"tru", b"1e400", b"NaN", b"Infinity",
    b'"\\u12"', b'"\\ud800"', b'"\\udc00\\ud800"', b"[1,]", b'{"a" 1}', b'{"a":1,}', b"'x'", b'"\t"',
    b'"\xff"', b'"\xed\xa0\x80"', b'"caf\xc3\xa9"', b"1.5e9999999999", nested(5_000, "[")[24:-1],
])
def test_a_value_in_a_field_no_reader_uses_is_taken_or_refused_as_the_whole_parse_does(value):
    body = b'{"action": "opened", "repository": {"full_name": "o/r", "x": ' + value + b'}, "y": ' + value + b"}"
    assert _read_and_whole("pull_request", body)[0] == _read_and_whole("pull_request", body)[1]


def test_an_integer_past_4300_digits_is_refused_where_a_reader_uses_it_and_skipped_elsewhere():
    digits = b"9" * 5_000
    used = b'{"action": "opened", "pull_request": {"number": ' + digits + b"}}"
    assert _outcome(parse_read, used)[0] == "refused"
    unused = b'{"action": "opened", "pull_request": {"number": 7, "n": ' + digits + b"}}"
    assert parse_read(unused) == {"action": "opened", "pull_request": {"number": 7}}


def test_a_field_read_as_an_object_that_is_something_else_is_left_to_the_whole_parse():
    for body in (b'{"pull_request": "x", "action": "opened"}', b'{"check_run": {"pull_requests": [1, {}]}}',
                 b'{"commits": {"added": []}}'):
        assert parse_read(body) == json.loads(body)


def test_the_fields_read_leave_out_the_rest_of_a_payload():
    body = json.dumps(webhook_examples("pull_request", action="synchronize")[0]).encode()
    read = parse_read(body)
    assert len(json.dumps(read)) < len(body) // 20
    assert read["pull_request"]["head"]["sha"] == json.loads(body)["pull_request"]["head"]["sha"]


# --- every field a reader uses is in routing.PAYLOAD_READ ---------------------------------------


class _Reads(dict):
    """A payload that notes the path of every field read from it (`[]` for a list's item, `*`
    for a look at all of an object's keys)."""

    def __init__(self, data: dict, path: tuple[str, ...], seen: set[tuple[str, ...]]) -> None:
        super().__init__({k: _watched(v, (*path, k), seen) for k, v in data.items()})
        self._path, self._seen = path, seen

    def _note(self, key: object) -> None:
        self._seen.add((*self._path, str(key)))

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def __contains__(self, key) -> bool:
        self._note(key)
        return super().__contains__(key)

    def _all(self):
        self._note("*")
        return self

    def keys(self):
        return super(_Reads, self._all()).keys()

    def values(self):
        return super(_Reads, self._all()).values()

    def items(self):
        return super(_Reads, self._all()).items()

    def __iter__(self):
        return super(_Reads, self._all()).__iter__()


def _watched(value: Any, path: tuple[str, ...], seen: set[tuple[str, ...]]) -> Any:
    if isinstance(value, dict):
        return _Reads(value, path, seen)
    if isinstance(value, list):
        return [_watched(v, (*path, "[]"), seen) for v in value]
    return value


def _kept(path: tuple[str, ...]) -> bool:
    node: Any = PAYLOAD_READ
    for name in path:
        if node is None:  # read whole
            return True
        if name == "[]":
            if not isinstance(node, list):
                return False
            node = node[0]
        elif isinstance(node, dict) and name in node:
            node = node[name]
        else:
            return False
    return True


def _fields_read(event: str, payload: dict) -> set[tuple[str, ...]]:
    seen: set[tuple[str, ...]] = set()
    _decided(event, _Reads(payload, (), seen))
    return seen


def test_every_field_a_reader_uses_of_every_example_is_in_the_fields_read():
    read: set[tuple[str, ...]] = set()
    for event in EVENTS:
        for example in webhook_examples(event):
            read |= _fields_read(event, example)
    read |= _fields_read("merge_group", copy.deepcopy(MERGE_GROUP))
    assert {p for p in read if not _kept(p)} == set()
    # The check can fail: a field no tree names is found.
    assert not _kept(("pull_request", "title")) and not _kept(("repository", "*"))
    assert ("pull_request", "head", "sha") in read and ("commits", "[]", "added") in read


@FUZZ
@given(event=st.sampled_from(ALL_EVENTS), data=st.data())
def test_every_field_a_reader_uses_of_a_hostile_payload_is_in_the_fields_read(event, data):
    payload = data.draw(_payloads(event))
    assert {p for p in _fields_read(event, payload) if not _kept(p)} == set()
