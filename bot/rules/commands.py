"""Reading a comment as a command (pure)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from bot.rules.model import MAX_ROUNDS

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


def _note_line_start(state: StateInline, silent: bool) -> bool:
    """Runs first wherever the inline parser starts a token and consumes nothing: notes the
    offsets that begin a line of the paragraph outside any link. A line that begins inside a
    code span or an inline HTML comment opened on an earlier line is never a token start, so it
    is never noted."""
    if not silent and state.level == 0 and state.src is state.env.get("paragraph"):
        line = state.src.rfind("\n", 0, state.pos) + 1
        if not state.src[line:state.pos].strip():
            state.env["line_starts"].append(state.pos)
    return False


# CommonMark, blocks only: code (fenced, indented), HTML blocks, block quotes and lists are told
# apart here; top-level paragraphs are then parsed inline one by one (`_command_lines`).
_MARKDOWN = MarkdownIt("commonmark").disable("inline")
_MARKDOWN.inline.ruler.before("text", "line_start", _note_line_start)
_NEWLINE = re.compile(r"\r\n?")  # as the parser normalises them, so its line numbers match ours


def _command_lines(tokens: list[Token]) -> Iterator[int]:
    """The numbers of the lines that start with `/converge` as plain text of a top-level
    paragraph: never in code, an HTML comment or block, a block quote or a list."""
    for i, tok in enumerate(tokens):
        if tok.type != "paragraph_open" or tok.level != 0 or tok.map is None:
            continue
        text = tokens[i + 1].content  # the paragraph's lines, as written
        line_starts: list[int] = []  # filled by `_note_line_start`
        env = {"paragraph": text, "line_starts": line_starts}
        _MARKDOWN.inline.parse(text, _MARKDOWN, env, [])
        for pos in line_starts:
            if text.startswith("/converge", pos):
                yield tok.map[0] + text.count("\n", 0, pos)


def parse_command(body: str) -> Command | Refusal | None:
    """None: not addressed to the bot. Only a line starting `/converge` in a top-level paragraph
    counts: one shown in code, quoted or hidden in an HTML comment never runs."""
    source = _NEWLINE.sub("\n", body or "")
    lines = source.split("\n")
    if not any(line.lstrip().startswith("/converge") for line in lines) and not ESCALATION_TAG.search(source):
        # Most comments are not for the bot: they are not parsed at all (Markdown parsing of a
        # long hostile comment costs the event loop a second or more).
        return None
    tokens = _MARKDOWN.parse(source)
    for i in _command_lines(tokens):
        line = lines[i].strip()
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
    return _quote_reply(lines, tokens)


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
            if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_ROUNDS:
                return Refusal(f"`--rounds` needs a number from 1 to {MAX_ROUNDS}.")
            rounds = int(value)
        else:
            return Refusal(f"Unknown option `{word}` (use `--rounds N`, `--no-merge`).")
    return Command("start", rounds=rounds, no_merge=no_merge)


def _quote_reply(lines: list[str], tokens: list[Token]) -> Command | None:
    """A reply quoting an escalation (in a top-level block quote), with the answer in the lines
    outside the quotes."""
    quoted = {n for t in tokens if t.type == "blockquote_open" and t.level == 0 and t.map
              for n in range(*t.map)}
    match = next((m for n in sorted(quoted) if (m := ESCALATION_TAG.search(lines[n]))), None)
    if match is None:
        return None
    answer = "\n".join(line for n, line in enumerate(lines) if n not in quoted).strip()
    if not answer:
        return None
    return Command("answer", text=answer, escalation_id=int(match.group(1)))
