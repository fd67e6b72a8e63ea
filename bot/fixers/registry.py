"""Building a fixer from its configured kind and settings."""

from __future__ import annotations

import inspect
import shlex
from typing import Any

from bot.fixers.ask import AuthorFixer, MentionFixer
from bot.fixers.base import Fixer
from bot.fixers.command import CommandFixer
from bot.fixers.presets import resolve as resolve_preset
from bot.fixers.scripted import ScriptedFixer

FIXER_KINDS: dict[str, type] = {
    "command": CommandFixer,
    "mention": MentionFixer,
    "author": AuthorFixer,
    "fake": ScriptedFixer,
}
TEST_ONLY_KINDS = frozenset({"fake"})  # `serve` refuses to start with these


def build_fixer(kind: str, **settings: Any) -> Fixer:
    """e.g. build_fixer("command", argv=["agent", "--prompt", "{prompt_file}"], timeout_seconds=900)
    or build_fixer("command", preset="claude-code", preset_args=["--model", "opus"], ...)

    A command's argv may be given as one shell-quoted string. Raises ValueError for an unknown
    kind, an unknown or missing setting, or an invalid value.
    """
    cls = FIXER_KINDS.get(kind)
    if cls is None:
        known = ", ".join(sorted(FIXER_KINDS))
        raise ValueError(f"unknown fixer kind {kind!r}: expected one of {known}")
    if kind == "command" and isinstance(settings.get("argv"), str):
        settings["argv"] = shlex.split(settings["argv"])
    if kind == "command" and settings.get("preset"):
        # A preset names the CLI; `argv`, if given, only says where its program is.
        settings["argv"], settings["preset"] = resolve_preset(
            settings.pop("preset"), settings.get("argv") or (), settings.pop("preset_args", ()),
            sandboxed=settings.get("sandbox") is not None)
    elif kind == "command":
        settings.pop("preset", None)
        if settings.pop("preset_args", None):
            raise ValueError("fixer preset_args is for a preset: put the flags in the command")
    params = inspect.signature(cls).parameters
    unknown = sorted(set(settings) - set(params))
    if unknown:
        raise ValueError(
            f"fixer kind {kind!r} takes no setting {', '.join(map(repr, unknown))}; "
            f"it takes: {', '.join(params) or 'none'}"
        )
    missing = [
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty and name not in settings
    ]
    if missing:
        raise ValueError(f"fixer kind {kind!r} needs the setting(s) {', '.join(missing)}")
    return cls(**settings)
