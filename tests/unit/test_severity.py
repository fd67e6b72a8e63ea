"""Each review bot's own severity markers, read from comments in the shape each bot posts them."""

from pathlib import Path

import pytest

import simulator
from bot.rules import severity
from simulator import load_scenario

SCENARIO = Path(simulator.__file__).parent / "scenarios" / "review_bots.toml"

CODERABBIT_MAJOR = """_⚠️ Potential issue_ | _🟠 Major_

**Guard the empty list.**

`mean([])` divides by zero.

<details>
<summary>🤖 Prompt for AI Agents</summary>

```
In stats/mean.py around line 2, add a guard. Nitpick: none.
```

</details>

<!-- This is an auto-generated comment by CodeRabbit -->"""


@pytest.mark.parametrize(("body", "expected"), [
    # CodeRabbit: a kind badge, then a level badge.
    (CODERABBIT_MAJOR, "major"),
    ("_⚠️ Potential issue_ | _🔴 Critical_\n\n**SQL built from user input.**", "critical"),
    ("_⚠️ Potential issue_ | _🟡 Minor_\n\n**Typo in the log message.**", "minor"),
    ("_🧹 Nitpick_ | _🔵 Trivial_\n\n**Prefer an f-string.**", "nit"),
    ("_🛠️ Refactor suggestion_ | _🟠 Major_\n\n**Split this function.**", "major"),
    # CodeRabbit's older comments carry only the kind badge.
    ("_⚠️ Potential issue_\n\n**Off by one.**", "major"),
    ("_🛠️ Refactor suggestion_\n\n**Extract a helper.**", "minor"),
    ("_🧹 Nitpick (assertive)_\n\n**Rename `x`.**", "nit"),
    # Gemini Code Assist: a priority image.
    ("![critical](https://www.gstatic.com/codereviewagent/critical.svg)\n\nThe token is logged.", "critical"),
    ("![high](https://www.gstatic.com/codereviewagent/high-priority.svg)\n\nDivides by zero.", "major"),
    ("![medium](https://www.gstatic.com/codereviewagent/medium-priority.svg)\n\nMissing type hints.", "minor"),
    ("![low](https://www.gstatic.com/codereviewagent/low-priority.svg)\n\nThe README could say more.", "nit"),
    # Codex: a P-badge in its title line.
    ("**<sub><sub>![P0 Badge](https://img.shields.io/badge/P0-red?style=flat)</sub></sub>  Data loss**", "critical"),
    ("**<sub><sub>![P1 Badge](https://img.shields.io/badge/P1-orange?style=flat)</sub></sub>  Crash**\n\n"
     "Useful? React with 👍 / 👎.", "major"),
    ("**<sub><sub>![P2 Badge](https://img.shields.io/badge/P2-yellow?style=flat)</sub></sub>  Slow path**", "minor"),
    ("**<sub><sub>![P3 Badge](https://img.shields.io/badge/P3-blue?style=flat)</sub></sub>  Naming**", "nit"),
    # People (and bots without badges): a nit prefix.
    ("nit: trailing whitespace", "nit"),
    ("Nit: rename this", "nit"),
    ("nitpick: a blank line here", "nit"),
    ("**Nit:** spacing", "nit"),
])
def test_each_marker_gives_its_severity(body, expected):
    assert severity.marked(body) == expected
    assert severity.of(body, "critical") == expected  # the marker wins over the reviewer's default


@pytest.mark.parametrize("body", [
    "This loop never ends when `n` is negative.",
    "The night build is broken by this change.",  # "nit" inside a word is no prefix
    "See the nitpick comments in the summary.",
])
def test_an_unmarked_comment_takes_its_reviewers_default(body):
    assert severity.marked(body) is None
    assert severity.of(body, "minor") == "minor"
    assert severity.of(body, "major") == "major"


def test_an_unknown_default_counts_as_major():
    assert severity.of("plain text", "urgent") == "major"
    assert severity.rank("urgent") == severity.rank("major")


def test_a_level_badge_wins_over_a_suggestion_block():
    body = "![high](https://www.gstatic.com/codereviewagent/high-priority.svg)\n\n```suggestion\nx = 1\n```"
    assert severity.marked(body) == "major"


@pytest.mark.parametrize(("found", "block_on", "blocks"), [
    ("critical", "nit", True), ("nit", "nit", True),
    ("major", "major", True), ("critical", "major", True),
    ("minor", "major", False), ("nit", "major", False),
    ("nit", "minor", False), ("minor", "minor", True),
    ("major", "critical", False), ("critical", "critical", True),
])
def test_block_on_is_the_least_severe_that_blocks(found, block_on, blocks):
    assert severity.blocks(found, block_on) is blocks


def test_the_scenarios_bot_comments_read_as_their_bots_mean():
    """The simulator's three bots speak in their real formats, and each comment reads as meant."""
    repo = load_scenario(SCENARIO).repos[0]
    read = {(r.login, t.path, t.line): severity.marked(t.body)
            for r in repo.reviewers for step in r.steps[:1] for t in step.threads}
    assert read == {
        ("coderabbitai[bot]", "stats/mean.py", 2): "major",
        ("coderabbitai[bot]", "stats/fmt.py", 2): "nit",
        ("gemini-code-assist[bot]", "stats/mean.py", 3): "major",
        ("gemini-code-assist[bot]", "README.md", 1): "nit",
        ("chatgpt-codex-connector[bot]", "stats/mean.py", 2): "major",
    }


def test_a_suggestion_block_alone_never_lowers_the_reviewers_default():
    body = "Simpler:\n\n```suggestion\nreturn x\n```"
    assert severity.marked(body) is None  # a small change, not a level
    assert severity.of(body, "nit") == "minor"  # raises a lower default
    assert severity.of(body, "major") == "major"  # never lowers the reviewer's own
    assert severity.of(body, "critical") == "critical"


GEMINI_HIGH = "![high](https://www.gstatic.com/codereviewagent/high-priority.svg)\n\nThe auth check is skipped.\n\n"


@pytest.mark.parametrize("quoted", [
    "```suggestion\n# _🔵 Trivial_\ncheck(user)\n```",
    "~~~python\n# _🔵 Trivial_ nit: x\n~~~",
    "```\nunclosed fence: _🧹 Nitpick_ ![low](https://www.gstatic.com/codereviewagent/low-priority.svg)",
    "<details>\n<summary>Committable suggestion</summary>\n\n_🔵 Trivial_\n</details>",
    "<!-- _🔵 Trivial_ -->",
    "The linter prints `_🔵 Trivial_` here.",
])
def test_quoted_markers_do_not_lower_a_finding(quoted):
    assert severity.marked(GEMINI_HIGH + quoted) == "major"
    assert severity.of(GEMINI_HIGH + quoted, "major") == "major"


def test_the_most_severe_marker_decides_not_the_first():
    body = ("![low](https://www.gstatic.com/codereviewagent/low-priority.svg)\n\n"
            "**<sub><sub>![P0 Badge](https://img.shields.io/badge/P0-red?style=flat)</sub></sub>  Data loss**")
    assert severity.marked(body) == "critical"
    # A kind badge is read only without a level: CodeRabbit's "potential issue" can be minor.
    assert severity.marked("_⚠️ Potential issue_ | _🟡 Minor_\n\n**Typo.**") == "minor"
