"""Building a fixer from its configured kind and settings."""

from __future__ import annotations

import inspect
import shlex
from typing import Any

from .ask import AuthorFixer, MentionFixer
from .base import Fixer
from .command import CommandFixer
from .scripted import ScriptedFixer

FIXER_KINDS: dict[str, type] = {
    "command": CommandFixer,
    "mention": MentionFixer,
    "author": AuthorFixer,
    "fake": ScriptedFixer,
}
TEST_ONLY_KINDS = frozenset({"fake"})  # `serve` refuses to start with these


def build_fixer(kind: str, **settings: Any) -> Fixer:
    """e.g. build_fixer("command", argv=["agent", "--prompt", "{prompt_file}"], timeout_seconds=900)

    A command's argv may be given as one shell-quoted string. Raises ValueError for an unknown
    kind, an unknown or missing setting, or an invalid value.
    """
    cls = FIXER_KINDS.get(kind)
    if cls is None:
        known = ", ".join(sorted(FIXER_KINDS))
        raise ValueError(f"unknown fixer kind {kind!r}: expected one of {known}")
    if kind == "command" and isinstance(settings.get("argv"), str):
        settings["argv"] = shlex.split(settings["argv"])
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
