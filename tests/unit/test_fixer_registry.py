"""build_fixer: one entry point from configuration to a fixer."""

from __future__ import annotations

import pytest

from bot.fixers import Fixer, build_fixer
from bot.fixers.ask import AuthorFixer, MentionFixer
from bot.fixers.command import CommandFixer
from bot.fixers.scripted import ScriptedFixer


def test_every_kind_builds_its_fixer():
    command = build_fixer("command", argv=["agent", "{prompt_file}"], timeout_seconds=60)
    assert isinstance(command, CommandFixer) and command.argv == ["agent", "{prompt_file}"]
    assert isinstance(build_fixer("mention", mention="@copilot"), MentionFixer)
    assert isinstance(build_fixer("author"), AuthorFixer)
    assert isinstance(build_fixer("fake", script=["push", "husk"]), ScriptedFixer)
    others = (build_fixer("mention"), build_fixer("author"), build_fixer("fake", script=["noop"]))
    assert all(isinstance(fixer, Fixer) for fixer in (command, *others))
    assert [f.kind for f in (command, build_fixer("mention"), build_fixer("author"))] == [
        "command", "mention", "author"]


def test_a_command_line_string_is_split_like_a_shell():
    fixer = build_fixer("command", argv="agent -p 'fix it' --file {prompt_file}", timeout_seconds=5)
    assert fixer.argv == ["agent", "-p", "fix it", "--file", "{prompt_file}"]


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(ValueError, match="kind 'robot'.*one of author, command, fake, mention"):
        build_fixer("robot")


@pytest.mark.parametrize("kind,settings,match", [
    ("command", {"timeout_seconds": 5}, "needs the setting"),
    ("command", {"argv": [], "timeout_seconds": 5}, "non-empty"),
    ("command", {"argv": ["a", 1], "timeout_seconds": 5}, "list of strings"),
    ("command", {"argv": ["a"], "timeout_seconds": 0}, "positive"),
    ("command", {"argv": ["a"], "timeout_seconds": 5, "colour": "red"}, "no setting 'colour'"),
    ("author", {"mention": "@x"}, "no setting 'mention'"),
    ("mention", {"mention": "  "}, "blank"),
    ("fake", {}, "needs the setting"),
    ("fake", {"script": ["dance"]}, "unknown behaviour"),
])
def test_bad_settings_are_a_clear_value_error(kind, settings, match):
    with pytest.raises(ValueError, match=match):
        build_fixer(kind, **settings)
