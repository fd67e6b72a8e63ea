"""Reading a fixer's verdict line and normalizing it (pure).

A fixer is untrusted text: its verdict can only pick among known statuses and thread actions,
and it can never make the bot invent a question for maintainers.
"""

from __future__ import annotations

import json
from typing import Any

from bot.fixers.base import (
    ADDRESSED,
    QUESTION_STATUSES,
    THREAD_ACTIONS,
    VERDICT_STATUSES,
    ThreadAction,
    Verdict,
)

TEXT_CAP = 4000  # summary, question and each reason; a verdict ends up in comments and rows
MAX_THREAD_ACTIONS = 500


def parse_verdict(stdout: str) -> tuple[str, dict | None]:
    """The last line of `stdout` that is a JSON object with a "status" key.

    Returns `(line, object)`; `("", None)` when there is none. Other lines (logs, progress,
    JSON without "status") are ignored, so a chatty agent can print what it likes before it.
    """
    for raw_line in reversed(stdout.splitlines()):
        line = raw_line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "status" in obj:
            return line, obj
    return "", None


def normalize(raw: dict | None, *, finished: bool) -> Verdict:
    """A Verdict from a parsed verdict object; anything unknown or malformed falls back safely."""
    if not isinstance(raw, dict):
        return Verdict(status=ADDRESSED, finished=finished)
    status = _status(raw.get("status"))
    question = _text(raw.get("question")) or None
    if status in QUESTION_STATUSES and question is None:
        status = ADDRESSED  # never invent a question: a blank one is no escalation
    return Verdict(
        status=status,
        summary=_text(raw.get("summary")),
        question=question if status in QUESTION_STATUSES else None,
        thread_actions=_thread_actions(raw.get("threads")),
        finished=finished,
    )


def _status(value: Any) -> str:
    if not isinstance(value, str):
        return ADDRESSED
    status = value.strip().lower().replace("-", "_").replace(" ", "_")
    return status if status in VERDICT_STATUSES else ADDRESSED


def _text(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return value.strip()[:TEXT_CAP].strip()


def _thread_actions(value: Any) -> tuple[ThreadAction, ...]:
    if not isinstance(value, list):
        return ()
    by_thread: dict[str, ThreadAction] = {}
    for entry in value:
        if not isinstance(entry, dict):
            continue
        thread_id, action = entry.get("id"), entry.get("action")
        if not isinstance(thread_id, str) or not thread_id.strip() or not isinstance(action, str):
            continue
        action = action.strip().lower()
        if action not in THREAD_ACTIONS:
            continue
        thread_id = thread_id.strip()
        # A thread named twice keeps its last action, as the last verdict line wins.
        by_thread.pop(thread_id, None)
        by_thread[thread_id] = ThreadAction(thread_id, action, _text(entry.get("reason")))  # type: ignore[arg-type]
    return tuple(by_thread.values())[-MAX_THREAD_ACTIONS:]
