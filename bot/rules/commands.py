"""Reading a comment as a command, and whether it comes too late for what it was written for (pure)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeGuard

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from bot.rules.model import MAX_ROUNDS

VERBS = ("start", "answer", "stop", "retry", "merge", "forget", "status")
ESCALATION_TAG = re.compile(r"convergebot escalation #(\d+)", re.IGNORECASE)
# GitHub stamps a comment to the second (rounded down), on its own clock: a comment stamped S
# was written in [S, S + 1 s). A run, round or escalation that began within STAMP_SLACK of a
# stamp (that second, and a second of clocks apart) counts as begun before the comment.
STAMP_RESOLUTION = timedelta(seconds=1)
STAMP_SLACK = timedelta(seconds=2)


def looks_like_command(body: object) -> TypeGuard[str]:
    """Worth a `command` job: the job parses the comment for real."""
    return isinstance(body, str) and ("/converge" in body or "convergebot escalation #" in body)


def edited(comment: dict[str, object]) -> bool:
    """Whether the comment was edited after it was posted: only what a comment said when it
    was posted is a command (an edit never is), wherever the comment was found."""
    return comment.get("updated_at") != comment.get("created_at")


@dataclass(frozen=True)
class Command:
    verb: str
    text: str = ""  # the answer for `answer`
    rounds: int | None = None
    no_merge: bool = False
    escalation_id: int | None = None  # a quote-reply names the escalation it answers
    # `start --depends-on`, as written (`#N` or `owner/repo#N`): read into keys against the PR's
    # repository by `explicit_dependencies`, as the CLI's and the API's are.
    depends_on: tuple[str, ...] = ()
    stack: bool = False  # `start --stack`: the PRs it is stacked on too (docs/stacks.md)


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
    rounds, no_merge, depends_on, stack = None, False, list[str](), False
    it = iter(words)
    for word in it:
        if word == "--no-merge":
            no_merge = True
        elif word == "--stack":
            stack = True
        elif word in ("--rounds", "--max-rounds") or word.startswith("--rounds="):
            value = word.partition("=")[2] or next(it, "")
            if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= MAX_ROUNDS:
                return Refusal(f"`--rounds` needs a number from 1 to {MAX_ROUNDS}.")
            rounds = int(value)
        elif word == "--depends-on" or word.startswith("--depends-on="):
            value = word.partition("=")[2] or next(it, "")
            if not value or value.startswith("--"):
                return Refusal("`--depends-on` needs a PR: `#N` or `owner/repo#N`.")
            depends_on.append(value)
        else:
            return Refusal(f"Unknown option `{word}` (use `--rounds N`, `--no-merge`, `--depends-on #N`, "
                           f"`--stack`).")
    return Command("start", rounds=rounds, no_merge=no_merge, depends_on=tuple(depends_on), stack=stack)


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


# --- the moment a command was written for ----------------------------------------------------
# A command may reach its job hours after it was written (a redelivery, the scan, the recovery
# on an escalated PR). It acts only on what was current when it was written; else its one reply
# says why nothing happened, and what to do instead.


def begun_since(written: datetime, began: datetime) -> bool:
    """Whether something began after a comment stamped `written` was written."""
    return began > written + STAMP_SLACK


def late_start(written: datetime, ended: datetime | None, outcome: str | None) -> str | None:
    """`/converge` on a PR whose run ended after the comment was written: the run it asked for
    was under way (or began after it) and is over, so the comment starts nothing. A comment
    stamped in the second the run ended may have come either side of the end; it is taken as
    written after it, as a maintainer's `/converge stop` and `/converge` in quick succession are."""
    if ended is None or ended < written + STAMP_RESOLUTION:
        return None
    how = f" ({outcome})" if outcome else ""
    return ("This `/converge` was written while a run of this PR was active or about to start; that run "
            f"has since ended{how}, so nothing was started. Comment `/converge` again to start a new run.")


def late_for_run(verb: str, written: datetime, run_started: datetime) -> str | None:
    """`stop`, `merge`, `retry` or `answer` written before the PR's current run began: it was
    meant for an earlier run (or for none), and never acts on this one."""
    if not begun_since(written, run_started):
        return None
    return (f"This `/converge {verb}` was written before the current run of this PR started, for an "
            "earlier run; nothing was changed. Comment it again if it still applies.")


def late_retry(written: datetime, round_no: int, round_started: datetime) -> str | None:
    """`/converge retry` restarts the round that was current when it was written, never a later one."""
    if not begun_since(written, round_started):
        return None
    return (f"This `/converge retry` was written before round {round_no} started; nothing was retried. "
            "Comment it again to retry this round.")


def late_answer(written: datetime, escalation_id: int, asked: datetime) -> str | None:
    """An answer answers the escalation that was open when it was written: one asked since is a
    question its author never saw."""
    if not begun_since(written, asked):
        return None
    return (f"This answer was written before escalation #{escalation_id} was asked, for an earlier "
            "question; nothing was changed. Answer the open question again.")
