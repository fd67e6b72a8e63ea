"""Fixers: whoever addresses review findings (a local agent command, a cloud agent, the author)."""

from .ask import AuthorFixer, MentionFixer
from .base import Finding, Fixer, FixRequest, ThreadAction, ThreadActionKind, Verdict
from .command import CommandFixer
from .registry import FIXER_KINDS, TEST_ONLY_KINDS, build_fixer
from .scripted import ScriptedFixer
from .verdict import normalize, parse_verdict

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
