"""What a preset's agent CLI reported, read from what it printed and wrote (pure).

Each CLI says three things in its own format: its final message (the round's summary), what
went wrong (edits or tool calls that failed), and what it used (tokens, a cost, turns). The
formats were read off the real CLIs at the versions in tests/agents/pins.toml
(tests/fixtures/agents/real/ holds their output):

| output | final message | failures | usage |
|---|---|---|---|
| `claude-stream` | the `result` event's `result` | `tool_result` blocks with `is_error` | `total_cost_usd`, `usage`, `num_turns` |
| `gemini-json` | `response` | `stats.tools.totalFail`, with stderr's "Error executing tool" lines | `stats.models.*.tokens` |
| `codex-json` | the last-message file, else the last `agent_message` | `file_change` items `failed`, stderr's `ERROR codex_core::tools` lines | `turn.completed`'s `usage` |
| `copilot-json` | the last `assistant.message` | `tool.execution_complete` events not successful | `result.usage` |
| `aider-history` | the last reply in its chat history, its edit blocks left out | "SearchReplaceNoExactMatch" / "failed to apply" in its history | its "Tokens: … Cost: $…" lines |
| `stdout` | the tail of standard output | none known | none known |

Failures count only when the run changed nothing (bot/fixers/command.py): an agent that
recovers from a failed edit by another route did its work.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bot.fixers.usage import Usage
from bot.fixers.verdict import TEXT_CAP

TAIL_CHARS = TEXT_CAP  # of standard output, for the CLIs that print their answer as plain text
FAILURES_KEPT = 5  # of a run's failed tool calls, the last ones, each cut to FAILURE_CHARS
FAILURE_CHARS = 500


@dataclass(frozen=True)
class Report:
    message: str
    failures: tuple[str, ...] = ()
    usage: Usage = field(default_factory=Usage)


def read(output: str, stdout: str, stderr: str = "", written: str | None = None) -> Report:
    """The report of a run whose CLI speaks `output` (a preset's format), from its standard
    output and error and the file it wrote (`written`: its message file's text, or None).

    A CLI with a format of its own that printed nothing in it has no message (its console
    output is not one), and its last words are its failure: the run then reads as no progress
    with what it said, never as an answer made of its log."""
    reader = _READERS.get(output)
    if reader is None:
        return Report(tail(stdout))
    report = reader(stdout, stderr, written)
    if report is not None:
        return report
    said = " ".join(next(([line.strip() for line in text.splitlines() if line.strip()][-2:]
                          for text in (stderr, stdout) if text.strip()), []))
    return Report("", _failures([f"it printed no {output} output" + (f"; its last words: {said}" if said else "")]))


def tail(text: str) -> str:
    """The text's last `TAIL_CHARS`: an agent's output may be a MiB, and every regex and the
    summary read only this much of it."""
    return text.strip()[-TAIL_CHARS:].strip()


def _cut(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= FAILURE_CHARS else text[:FAILURE_CHARS - 1] + "…"


def _failures(found: list[str]) -> tuple[str, ...]:
    """The last `FAILURES_KEPT` distinct failures, each cut."""
    distinct = list(dict.fromkeys(_cut(f) for f in found if str(f).strip()))
    return tuple(distinct[-FAILURES_KEPT:])


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


# -- JSON in standard output -----------------------------------------------------------------

JSON_CANDIDATES = 20  # lines starting with `{`, from the end, tried as an object's start


def _table(value: object) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _json_object(stdout: str, key: str) -> dict | None:
    """The JSON object holding `key`: all of stdout (it may be pretty-printed), else the last
    line or the last block starting at a line's `{` that parses (logs may come before it).

    Only the last `JSON_CANDIDATES` lines starting with `{` are tried, one at a time: each
    block is a copy of the rest of stdout, and stdout of `{` lines would otherwise cost time
    and memory quadratic in its size."""
    for candidate in _json_candidates(stdout.strip()):
        try:
            obj = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(obj, dict) and key in obj:
            return obj
    return None


def _json_candidates(text: str) -> Iterator[str]:
    yield text
    lines = text.splitlines()
    tried = 0
    for i in range(len(lines) - 1, -1, -1):
        if tried >= JSON_CANDIDATES:
            return
        if lines[i].lstrip().startswith("{"):
            tried += 1
            yield lines[i]
            if i < len(lines) - 1:
                yield "\n".join(lines[i:])


def _events(stdout: str, *needles: str) -> Iterator[dict]:
    """Each line of JSON Lines output that is an object and holds one of `needles` (the event
    types wanted, found before anything is parsed: a MiB of other lines costs a scan, not a
    parse each); other lines are skipped."""
    for line in stdout.splitlines():
        if line.startswith("{") and any(n in line for n in needles):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                yield obj


# -- Claude Code: `--output-format stream-json --verbose` ------------------------------------

def _claude(stdout: str, stderr: str, written: str | None) -> Report | None:
    failures: list[str] = []
    for event in _events(stdout, '"is_error"'):
        if event.get("type") != "user":
            continue
        for block in ((event.get("message") or {}).get("content") or ()):
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error"):
                failures.append(_tool_error_text(block.get("content")))
    result = _json_object(stdout, "result")
    if result is None:
        return Report("", _failures(failures)) if failures else None
    usage = _table(result.get("usage"))
    cost = result.get("total_cost_usd")
    message = result["result"] if isinstance(result.get("result"), str) else ""
    if result.get("is_error") and not message:
        failures.append(str(result.get("subtype") or "error"))
    return Report(tail(message), _failures(failures), Usage(
        input_tokens=sum(_int(usage.get(k)) for k in
                         ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
        turns=_int(result.get("num_turns")) or None))


_TAGS = re.compile(r"</?tool_use_error>")


def _tool_error_text(content: object) -> str:
    """A tool result's text: a string, or the text blocks of a list."""
    if isinstance(content, list):
        content = " ".join(b.get("text", "") for b in content if isinstance(b, dict))
    return _TAGS.sub("", str(content or "")).strip()


# -- Gemini CLI: `--output-format json` --------------------------------------------------------

_GEMINI_TOOL_ERROR = re.compile(r"^Error executing tool (.+)$", re.MULTILINE)


def _gemini(stdout: str, stderr: str, written: str | None) -> Report | None:
    obj = _json_object(stdout, "response")
    if obj is None:
        return None
    stats = _table(obj.get("stats"))
    tools = _table(stats.get("tools"))
    failed = _int(tools.get("totalFail"))
    failures = _GEMINI_TOOL_ERROR.findall(stderr)[-failed:] if failed else []
    if failed and not failures:
        names = [name for name, t in (tools.get("byName") or {}).items() if isinstance(t, dict) and t.get("fail")]
        failures = [f"{failed} tool call(s) failed: {', '.join(names) or 'unnamed'}"]
    tokens_in = tokens_out = 0
    for model in (stats.get("models") or {}).values():
        tokens = (model or {}).get("tokens") or {}
        tokens_in += _int(tokens.get("prompt"))
        tokens_out += _int(tokens.get("candidates")) + _int(tokens.get("thoughts"))
    message = obj["response"] if isinstance(obj.get("response"), str) else ""
    return Report(tail(message), _failures(failures), Usage(tokens_in, tokens_out))


# -- codex: `exec --json` and `--output-last-message` -------------------------------------------

# `2026-12-04T08:53:26.503896Z ERROR codex_core::tools::router: error=...`, its message running
# on over the lines up to the next log line.
_CODEX_ERROR = re.compile(r"^\S+Z\s+ERROR\s+codex_core::tools\S*: (?:error=)?(.*)$")
_CODEX_LOG_LINE = re.compile(r"^\S+Z\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s")


def _codex(stdout: str, stderr: str, written: str | None) -> Report | None:
    message, failures, seen = "", [], False
    tokens_in = tokens_out = turns = 0
    for event in _events(stdout, "item.completed", "turn.", '"error"'):
        seen = True
        item = _table(event.get("item"))
        if event.get("type") == "item.completed" and item.get("type") == "agent_message":
            message = str(item.get("text") or "")
        elif event.get("type") == "item.completed" and item.get("status") == "failed":
            paths = [c.get("path", "") for c in item.get("changes") or () if isinstance(c, dict)]
            failures.append(f"{item.get('type')} failed" + (f": {', '.join(paths)}" if paths else ""))
        elif event.get("type") == "turn.completed":
            usage = _table(event.get("usage"))
            tokens_in += _int(usage.get("input_tokens"))
            tokens_out += _int(usage.get("output_tokens")) + _int(usage.get("reasoning_output_tokens"))
            turns += 1
        elif event.get("type") in ("turn.failed", "error"):
            error = _table(event.get("error"))
            failures.append(str(error.get("message") or event.get("message") or event.get("type")))
    failures = _codex_errors(stderr) or failures
    if written and written.strip():
        message = written
    elif not seen:
        return None
    return Report(tail(message), _failures(failures), Usage(tokens_in, tokens_out, turns=turns or None))


def _codex_errors(stderr: str) -> list[str]:
    """The tool errors codex logs on stderr, each with its continuation lines (up to the next
    log line or a blank one)."""
    found: list[list[str]] = []
    current: list[str] | None = None
    for line in stderr.splitlines():
        m = _CODEX_ERROR.match(line)
        if m:
            current = [m.group(1)]
            found.append(current)
        elif _CODEX_LOG_LINE.match(line) or not line.strip():
            current = None
        elif current is not None and len(current) < 20:
            current.append(line.strip())
    return [" ".join(lines) for lines in found]


# -- Copilot CLI: `--output-format json` and `--usage-output-file` -------------------------------

def _copilot(stdout: str, stderr: str, written: str | None) -> Report | None:
    message, failures, names, seen = "", [], {}, False
    for event in _events(stdout, "assistant.message", "tool.execution_"):
        seen = True
        data = _table(event.get("data"))
        if event.get("type") == "assistant.message" and not data.get("toolRequests"):
            message = str(data.get("content") or "") or message
        elif event.get("type") == "tool.execution_start":
            names[data.get("toolCallId")] = data.get("toolName")
        elif event.get("type") == "tool.execution_complete" and data.get("success") is False:
            error = _table(data.get("error"))
            name = names.get(data.get("toolCallId")) or "a tool call"
            failures.append(f"{name}: {error.get('message') or 'failed'}")
    if not seen:
        return None
    tokens_in = tokens_out = 0
    try:
        usage = json.loads(written) if written else {}
    except ValueError:
        usage = {}
    for model in ((usage.get("modelMetrics") or {}) if isinstance(usage, dict) else {}).values():
        counts = (model or {}).get("usage") or {}
        tokens_in += _int(counts.get("inputTokens")) + _int(counts.get("cacheReadTokens"))
        tokens_out += _int(counts.get("outputTokens"))
    # Its `cost` counts premium requests of a Copilot plan, not dollars: priced by the bot.
    return Report(tail(message), _failures(failures), Usage(tokens_in, tokens_out))


# -- aider: its chat history file ---------------------------------------------------------------

# Each reply ends with its `> Tokens: 1.2k sent, 80 received. Cost: $0.0048 message, …` line;
# with cache figures in it, the cost goes on a line of its own (`Cost: $…`, no `> `).
_AIDER_TOKENS = re.compile(r"^> Tokens: ([\d.]+)([kM]?) sent(?:, [^,]*? cache \w+)*, ([\d.]+)([kM]?) received\.")
_AIDER_COST = re.compile(r"^(?:> Tokens: .*?|>? ?)Cost: \$([\d.]+) message")
_AIDER_FAILED = re.compile(r"^## (SearchReplaceNoExactMatch: .+)$|^> (Only \d+ reflections allowed, stopping\.)"
                           r"|^> (litellm\.\w+: .+?)\s*$")
# The reflection aider sends back after an edit failed, written into the history as prose.
_AIDER_REFLECTION = re.compile(r"^(## SearchReplaceNoExactMatch|# \d+ SEARCH/REPLACE blocks? failed)")
_AIDER_REFLECTION_END = "The SEARCH section must exactly match"
_SCALE = {"": 1, "k": 1_000, "M": 1_000_000}


def _aider(stdout: str, stderr: str, written: str | None) -> Report | None:
    if not written:
        return None
    lines = written.splitlines()
    # The one user message (--message-file) is the first run of `#### ` lines: a reply's own
    # `#### ` heading further down is the reply's.
    first = next((i for i, line in enumerate(lines) if line.startswith("#### ")), None)
    if first is not None:
        end = next((i for i in range(first, len(lines)) if not lines[i].startswith("#### ")), len(lines))
        lines = lines[end:]
    replies: list[list[str]] = [[]]
    failures: list[str] = []
    tokens_in = tokens_out = 0
    cost, priced, in_reflection = 0.0, False, False
    for line in lines:
        paid = _AIDER_COST.match(line)
        if paid:
            cost, priced = cost + float(paid.group(1)), True
        m = _AIDER_TOKENS.match(line)
        if m:
            tokens_in += round(float(m.group(1)) * _SCALE[m.group(2)])
            tokens_out += round(float(m.group(3)) * _SCALE[m.group(4)])
            replies.append([])
            continue
        if paid:
            continue
        failed = _AIDER_FAILED.match(line)
        if failed:
            failures.append(next(g for g in failed.groups() if g))
        if _AIDER_REFLECTION.match(line):
            in_reflection = True
        if in_reflection:
            in_reflection = not line.startswith(_AIDER_REFLECTION_END)
            continue
        if not line.startswith(">"):
            replies[-1].append(line)
    said = next((r for r in reversed(replies) if "".join(r).strip()), [])
    if not said and not failures and not priced:
        return None
    return Report(tail(_without_edit_blocks(said)), _failures(list(dict.fromkeys(failures))),
                  Usage(tokens_in, tokens_out, round(cost, 6) if priced else None))


def _without_edit_blocks(lines: list[str]) -> str:
    """A reply's prose: its fenced SEARCH/REPLACE blocks left out, with the file name line that
    heads each (aider's diff format), since the commit shows the change better."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].lstrip().startswith("```")), len(lines))
            block = lines[i:end + 1]
            if any(b.startswith("<<<<<<< SEARCH") for b in block):
                if out and out[-1].strip() and " " not in out[-1].strip():
                    out.pop()  # the file name line
                i = end + 1
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out).strip()


# -- plain files ----------------------------------------------------------------------------------

def _file(stdout: str, stderr: str, written: str | None) -> Report | None:
    return Report(tail(written)) if written and written.strip() else None


_READERS = {
    "claude-stream": _claude,
    "gemini-json": _gemini,
    "codex-json": _codex,
    "copilot-json": _copilot,
    "aider-history": _aider,
    "file": _file,
}
