"""The webhook body's parser: msgspec for speed, the standard library for what msgspec refuses, so
every body parses (or fails) exactly as `json.loads` alone would have it."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.web.webhook import parse

from ..hostile import ENCODINGS, EVENTS, FUZZ, encode, nested, payloads, raw_bodies


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
