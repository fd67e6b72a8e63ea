import pytest

from bot.rules.commands import Command, Refusal, parse_command


@pytest.mark.parametrize("body,expected", [
    ("/converge", Command("start")),
    ("please\n/converge start --rounds 5 --no-merge", Command("start", rounds=5, no_merge=True)),
    ("/converge start --rounds=3", Command("start", rounds=3)),
    ("/converge stop", Command("stop")),
    ("/converge retry", Command("retry")),
    ("/converge merge", Command("merge")),
    ("/converge forget", Command("forget")),
    ("/converge status", Command("status")),
    ("/converge start --depends-on #3", Command("start", depends_on=("#3",))),
    ("/converge start --depends-on=octo/lib#4 --no-merge --depends-on #3 --rounds 2",
     Command("start", rounds=2, no_merge=True, depends_on=("octo/lib#4", "#3"))),
    # Read as written: `explicit_dependencies` refuses a malformed one, as the CLI and API do.
    ("/converge start --depends-on nonsense", Command("start", depends_on=("nonsense",))),
    ("/converge answer keep the old name\nbecause callers rely on it",
     Command("answer", text="keep the old name\nbecause callers rely on it")),
    ("> **convergebot escalation #12**\n> Should we rename?\n\nNo, keep it.",
     Command("answer", text="No, keep it.", escalation_id=12)),
])
def test_commands(body, expected):
    assert parse_command(body) == expected


@pytest.mark.parametrize("body", [
    "", "lgtm", "we should /converge later", "> /converge stop", "```\n/converge stop\n```",
    "/convergex", "> **convergebot escalation #3**\n> question",
])
def test_not_a_command(body):
    assert parse_command(body) is None


@pytest.mark.parametrize("body,why", [
    ("/converge answer", "needs the answer"),
    ("/converge frobnicate", "Unknown command"),
    ("/converge start --rounds x", "--rounds"),
    ("/converge start --rounds 0", "--rounds"),
    ("/converge start --rounds ²", "--rounds"),  # str.isdigit() says yes; int() says no
    ("/converge start --fast", "Unknown option"),
    ("/converge start --depends-on", "`--depends-on` needs a PR"),
    ("/converge start --depends-on=", "`--depends-on` needs a PR"),
    ("/converge start --depends-on --no-merge", "`--depends-on` needs a PR"),
    ("/converge --depends-on #3", "Unknown command"),
    ("/converge stop now", "takes no arguments"),
])
def test_malformed_commands_are_refused_with_a_reason(body, why):
    result = parse_command(body)
    assert isinstance(result, Refusal) and why in result.why


# Every Markdown construct a `/converge` line can sit in without being a line of the comment's
# own text: each is shown as code, quoted, hidden or nested, so none of them is a command.
@pytest.mark.parametrize("body", [
    pytest.param("```\n/converge stop\n```", id="backtick fence"),
    pytest.param("~~~\n/converge stop\n~~~", id="tilde fence"),
    pytest.param("~~~ text\n/converge stop\n~~~", id="tilde fence with info"),
    pytest.param("````\n```\n/converge stop\n````", id="fence holding a shorter fence"),
    pytest.param("```\n/converge stop", id="fence never closed"),
    pytest.param("notes:\n\n    /converge stop", id="indented code"),
    pytest.param("\t/converge stop", id="tab-indented code"),
    pytest.param("`/converge stop`", id="inline code"),
    pytest.param("see `x\n/converge stop`", id="inline code across lines"),
    pytest.param("``\n/converge stop\n``", id="double-backtick inline code"),
    pytest.param("<!-- /converge stop -->", id="html comment"),
    pytest.param("<!--\n/converge stop\n-->", id="html comment block"),
    pytest.param("thanks <!-- hidden\n/converge stop -->", id="html comment inline across lines"),
    pytest.param("<div>\n/converge stop\n</div>", id="html block"),
    pytest.param("> /converge stop", id="block quote"),
    pytest.param(">> /converge stop", id="nested block quote"),
    pytest.param("> you wrote\n/converge stop", id="block quote lazy continuation"),
    pytest.param("- /converge stop", id="list item"),
    pytest.param("1. first\n/converge stop", id="list item lazy continuation"),
    pytest.param("[see\n/converge stop](https://example.com)", id="link text"),
    pytest.param("# /converge stop", id="heading"),
])
def test_a_command_in_code_quotes_or_comments_is_not_a_command(body):
    assert parse_command(body) is None


@pytest.mark.parametrize("body,expected", [
    ("```\n/converge stop\n```\n/converge retry", Command("retry")),
    ("~~~\n/converge stop\n~~~\n\n/converge retry", Command("retry")),
    ("<!-- /converge stop -->\n/converge retry", Command("retry")),
    ("> /converge stop\n\n/converge retry", Command("retry")),
    ("`/converge stop` is what I meant\n/converge retry", Command("retry")),
    ("sure\r\n   /converge retry\r\n", Command("retry")),
    ("done\\\n/converge retry", Command("retry")),
    ("`a\nb` done\n/converge retry", Command("retry")),
])
def test_a_command_beside_code_quotes_or_comments_still_counts(body, expected):
    assert parse_command(body) == expected


def test_an_answer_keeps_the_code_written_after_it():
    answer = "rename it like this:\n```py\nnew_name = 1\n```\nthanks"
    assert parse_command(f"/converge answer {answer}") == Command("answer", text=answer)


@pytest.mark.parametrize("body", [
    pytest.param("```\n> **convergebot escalation #3**\n```\nyes", id="quoted in code"),
    pytest.param("> **convergebot escalation #3**\nyes", id="answer lazily inside the quote"),
])
def test_a_quote_reply_needs_a_real_quote_and_an_answer_outside_it(body):
    assert parse_command(body) is None
