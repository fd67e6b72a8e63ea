"""What a stored failure shows: its kind and a short message, without tokens, credentialed URLs
or the machine's paths, and API routes and URLs kept readable."""

from __future__ import annotations

import pytest

from bot.redact import SHOWN_CHARS, hide_secrets, scrub, shown

TOKEN = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


@pytest.mark.parametrize(("stored", "expected"), [
    ("bot.github.errors.Malformed: GET /repos/acme/app/pulls/1: malformed answer (no body)",
     "Malformed: GET /repos/acme/app/pulls/1: malformed answer (no body)"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/etc/convergebot/app.pem'",
     "FileNotFoundError: [Errno 2] No such file or directory: '<path>'"),
    (f"RuntimeError: clone of https://x-access-token:{TOKEN}@github.com/a/b.git into ~/work/b failed",
     "RuntimeError: clone of https://github.com/a/b.git into <path> failed"),
    (f"ValueError: sent token {TOKEN} to https://hooks.example/in?token=abc123&x=1 from C:\\bot\\run",
     "ValueError: sent token *** to https://hooks.example/in?token=***&x=1 from <path>"),
    ("OSError: a JWT eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxMjMifQ.c2lnbmF0dXJl and v1." + "a" * 40,
     "OSError: a JWT *** and ***"),
    ("git: AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzXzEyMw==", "git: AUTHORIZATION: basic ***"),
    ("dry run: would have merged at 3c0007f", "dry run: would have merged at 3c0007f"),
    ("the token expired; 50/50 retries in bot/engine/step.py", "the token expired; 50/50 retries in bot/engine/step.py"),
    ("RuntimeError: one\n  two\n", "RuntimeError: one two"),
    (None, None),
])
def test_a_failure_is_shown_as_its_kind_and_a_scrubbed_message(stored, expected):
    assert shown(stored) == expected


def test_a_long_message_is_cut():
    said = shown("ValueError: " + "x" * 1000)
    assert said == "ValueError: " + "x" * (SHOWN_CHARS - 1) + "…"


def test_hiding_secrets_keeps_paths_for_the_operator():
    assert hide_secrets(f"push https://u:{TOKEN}@h.example/r.git in /srv/clone") == "push https://h.example/r.git in /srv/clone"


def test_markup_and_links_in_a_summary_stay_as_written():
    text = "Fixed <b>it</b>, see [docs](https://example.com/docs/a) and /tmp/clone/app.py"
    assert scrub(text) == "Fixed <b>it</b>, see [docs](https://example.com/docs/a) and <path>"
