"""The findings engine against hostile or odd comment text: anyone who can comment on a PR
writes what it reads, and every step fingerprints every unresolved thread."""

import time

import pytest

from bot.rules import severity
from bot.rules.findings import (
    GROUP_SIMILARITY,
    from_threads,
    group,
    normalised,
    similarity,
    thread_fingerprint,
)
from bot.rules.model import Thread

# 64 KB each. Before `[ \t]*` replaced `\s*` after `^`, 2,000 newlines alone took 22 s.
HOSTILE = {
    "blank lines": "\n" * 65536 + "x",
    "spaces and newlines": " \n" * 32768 + "x",
    "indented blank lines": "\t \n" * 21845 + "x",
    "bold and emphasis": "**_" * 21845 + "\n",
    "emphasis on lines": "_ \n" * 21845 + "x",
    "repeated nit": "nit " * 16384 + "\n",
    "nit on every line": " nit \n" * 10922 + "x",
    "unclosed comments": "<!--" * 16384,
    "unclosed details": "<details>" * 7281,
    "unclosed fences": "```\n" * 16384,
    "unclosed tags": "<a" * 32768,
}


def thread(body: str, id="T1", line=10, author="coderabbitai[bot]", path="app/auth.py") -> Thread:
    return Thread(id=id, is_resolved=False, is_outdated=False, path=path, line=line, comment_id=1,
                  body=body, author=author)


def test_adversarial_comments_are_read_in_bounded_time():
    """A regression guard against backtracking blow-up, not a benchmark: the old patterns took
    minutes on these inputs, the bound is generous."""
    start = time.monotonic()
    for name, body in HOSTILE.items():
        assert len(body) >= 64000, name
        normalised(body)
        severity.of(body, "major")
        (finding,) = from_threads((thread(body),))
        assert finding.fingerprint and finding.severity
    assert time.monotonic() - start < 2.0


def test_a_comment_that_normalises_to_nothing_keeps_a_print_of_its_own():
    bodies = ["_this deletes the auth check_", "_Typo in docstring_",
              "![screenshot](https://example.com/a.png)", "![screenshot](https://example.com/b.png)"]
    prints = {thread_fingerprint("app/auth.py", b) for b in bodies}
    assert len(prints) == len(bodies)
    # The same bare image repeated is still the same question.
    assert thread_fingerprint("app/auth.py", bodies[2]) == thread_fingerprint("app/auth.py", bodies[2])


def test_emphasised_text_keeps_its_words():
    assert normalised("_this deletes the auth check_") == "this deletes the auth check"
    assert normalised("*Typo* in _docstring_") == "typo in docstring"
    # CodeRabbit's badge line (each badge opens with its emoji) is still boilerplate.
    assert normalised("_⚠️ Potential issue_ | _🟠 Major_\n\n**Off by one.**") == "off by one."


def test_short_comments_near_each_other_are_not_one_finding():
    a = thread("_this deletes the auth check_", id="A", line=10)
    b = thread("_Typo in docstring_", id="B", line=11, author="gemini-code-assist[bot]")
    assert len(group(from_threads((a, b)))) == 2


@pytest.mark.parametrize(("first", "second"), [
    ("Missing null check before dereferencing `user`.", "Missing bounds check before indexing `user`."),
    ("The loop never ends when `n` is negative.", "The loop never runs when `n` is zero."),
])
def test_two_different_bugs_on_nearby_lines_are_not_grouped(first, second):
    a = thread(first, id="A", line=10)
    b = thread(second, id="B", line=12, author="gemini-code-assist[bot]")
    assert similarity(first, second) < GROUP_SIMILARITY
    assert sorted(f.thread_id for f in group(from_threads((a, b)))) == ["A", "B"]


def test_near_duplicates_on_nearby_lines_are_still_grouped():
    a = thread("Missing null check before dereferencing `user`: guard it.", id="A", line=10)
    b = thread("Missing null check before dereferencing `user`; guard it!", id="B", line=12,
               author="gemini-code-assist[bot]")
    (found,) = group(from_threads((a, b)))
    assert {found.thread_id, *(t[0] for t in found.twins)} == {"A", "B"}
