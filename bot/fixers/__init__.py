"""Fixers: whoever addresses review findings (a local agent command, a cloud agent, the author)."""

from bot.fixers.ask import AuthorFixer, MentionFixer
from bot.fixers.base import Fixer, FixRequest, ThreadAction, ThreadActionKind, Verdict
from bot.fixers.command import CommandFixer
from bot.fixers.registry import FIXER_KINDS, TEST_ONLY_KINDS, build_fixer
from bot.fixers.scripted import ScriptedFixer
from bot.fixers.verdict import normalize, parse_verdict
from bot.rules.model import Finding

__all__ = [
    "AuthorFixer",
    "CommandFixer",
    "FIXER_KINDS",
    "Finding",
    "FixRequest",
    "Fixer",
    "MentionFixer",
    "ScriptedFixer",
    "TEST_ONLY_KINDS",
    "ThreadAction",
    "ThreadActionKind",
    "Verdict",
    "build_fixer",
    "normalize",
    "parse_verdict",
]
