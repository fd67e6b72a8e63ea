"""Reading a comment as a command (pure)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

VERBS = ("start", "answer", "stop", "retry", "merge", "forget", "status")
ESCALATION_TAG = re.compile(r"convergebot escalation #(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Command:
    verb: str
    text: str = ""  # the answer for `answer`
    rounds: int | None = None
    no_merge: bool = False
    escalation_id: int | None = None  # a quote-reply names the escalation it answers


@dataclass(frozen=True)
class Refusal:
    """A comment that is a command but a malformed one: the reply says why."""

    why: str


def _lines_outside_code(body: str) -> list[str]:
    lines, fenced = [], False
    for line in body.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def parse_command(body: str) -> Command | Refusal | None:
    """None: not addressed to the bot. Only an unquoted line starting `/converge` counts."""
    lines = _lines_outside_code(body or "")
    for i, raw in enumerate(lines):
        line = raw.strip()
        if not (line == "/converge" or line.startswith("/converge ")):
            continue
        rest = line[len("/converge"):].strip()
        if not rest:
            return Command("start")
        verb, _, tail = rest.partition(" ")
        verb = verb.lower()
        if verb == "answer":
            text = "\n".join([tail.strip(), *lines[i + 1:]]).strip()
            if not text:
                return Refusal("`/converge answer` needs the answer after it.")
            return Command("answer", text=text)
        if verb == "start":
            return _parse_start(tail)
        if verb in VERBS:
            if tail.strip():
                return Refusal(f"`/converge {verb}` takes no arguments.")
            return Command(verb)
        return Refusal(f"Unknown command `{verb}`. Known: {', '.join(VERBS)}.")
    return _quote_reply(lines)


def _parse_start(tail: str) -> Command | Refusal:
    try:
        words = shlex.split(tail)
    except ValueError:
        return Refusal("Could not read the options of `/converge start`.")
    rounds, no_merge = None, False
    it = iter(words)
    for word in it:
        if word == "--no-merge":
            no_merge = True
        elif word in ("--rounds", "--max-rounds") or word.startswith("--rounds="):
            value = word.partition("=")[2] or next(it, "")
            if not value.isdigit() or not 1 <= int(value) <= 100:
                return Refusal("`--rounds` needs a number from 1 to 100.")
            rounds = int(value)
        else:
            return Refusal(f"Unknown option `{word}` (use `--rounds N`, `--no-merge`).")
    return Command("start", rounds=rounds, no_merge=no_merge)


def _quote_reply(lines: list[str]) -> Command | None:
    """A reply quoting an escalation, with the answer in its unquoted lines."""
    quoted = [line for line in lines if line.lstrip().startswith(">")]
    match = next((m for q in quoted if (m := ESCALATION_TAG.search(q))), None)
    if match is None:
        return None
    answer = "\n".join(line for line in lines if not line.lstrip().startswith(">")).strip()
    if not answer:
        return None
    return Command("answer", text=answer, escalation_id=int(match.group(1)))
