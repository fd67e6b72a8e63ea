import pytest

from bot.commands.parse import Command, Refusal, parse_command


@pytest.mark.parametrize("body,expected", [
    ("/converge", Command("start")),
    ("please\n/converge start --rounds 5 --no-merge", Command("start", rounds=5, no_merge=True)),
    ("/converge start --rounds=3", Command("start", rounds=3)),
    ("/converge stop", Command("stop")),
    ("/converge retry", Command("retry")),
    ("/converge merge", Command("merge")),
    ("/converge forget", Command("forget")),
    ("/converge status", Command("status")),
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
    ("/converge start --fast", "Unknown option"),
    ("/converge stop now", "takes no arguments"),
])
def test_malformed_commands_are_refused_with_a_reason(body, why):
    result = parse_command(body)
    assert isinstance(result, Refusal) and why in result.why
