"""What each preset's CLI reported, read from the real CLIs' output (bot/fixers/reports.py).

Every input here is a file in tests/fixtures/agents/real/, captured from the real CLI against
the fake model (`make agents`, docs/fixers.md); every expected value is written out from that
file's text. The fake model's plan gave each call 1,200 tokens in and 80 out.
"""

from __future__ import annotations

from pathlib import Path

from bot.fixers.reports import Report, read
from bot.fixers.usage import Usage

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / "real"
SHORT = "Fixed add() in src/app.py."  # the final text of the claude-code, codex and gemini runs
LONG = "Fixed add() in src/app.py: it subtracted, it adds now."  # copilot's and aider's


def text(cli: str, name: str) -> str:
    return (REAL / cli / name).read_text(encoding="utf-8")


def report(output: str, cli: str, stdout: str, stderr: str | None = None, written: str | None = None) -> Report:
    """`read` of the named fixtures (stderr and written: file names, or None for none)."""
    return read(output, text(cli, stdout), text(cli, stderr) if stderr else "",
                text(cli, written) if written else None)


# -- Claude Code: --output-format stream-json --verbose -------------------------------------------

def test_claude_code_success():
    r = report("claude-stream", "claude-code", "success.stream-json.stdout")
    assert r.message == SHORT
    assert r.failures == ()
    # The result line: "total_cost_usd":0.012799999999999999, "usage":{"input_tokens":2400,
    # "cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":160,...},
    # "num_turns":2.
    assert r.usage == Usage(input_tokens=2400, output_tokens=160, cost_usd=0.012799999999999999, turns=2)


def test_claude_code_failed_edit_is_the_tool_result_with_is_error():
    r = report("claude-stream", "claude-code", "failed-edit.stream-json.stdout")
    # The result object still says "subtype":"success" and the model's claim.
    assert r.message == SHORT
    # "content":"<tool_use_error>String to replace not found in file.\nString: a * b</tool_use_error>",
    # "is_error":true: the tags dropped, the lines joined.
    assert r.failures == ("String to replace not found in file. String: a * b",)
    assert r.usage == Usage(input_tokens=2400, output_tokens=160, cost_usd=0.012799999999999999, turns=2)


def test_claude_code_plain_json_hides_the_failed_edit():
    # Why the preset asks for stream-json: the lone result object of --output-format json is
    # the same for the failed edit as for success.
    failed = report("claude-stream", "claude-code", "failed-edit.json.stdout")
    success = report("claude-stream", "claude-code", "success.json.stdout")
    assert failed == success == Report(SHORT, (), Usage(2400, 160, 0.012799999999999999, turns=2))


# -- codex: exec --json, --output-last-message ------------------------------------------------------

def test_codex_success():
    r = report("codex-json", "codex", "success.json.stdout", "success.json.stderr",
               "success.json.last-message.txt")
    assert r.message == SHORT
    assert r.failures == ()
    # {"type":"turn.completed","usage":{"input_tokens":2400,"cached_input_tokens":0,
    # "cache_write_input_tokens":0,"output_tokens":160,"reasoning_output_tokens":0}}; no cost.
    assert r.usage == Usage(input_tokens=2400, output_tokens=160, cost_usd=None, turns=1)


def test_codex_final_message_without_its_file_is_the_last_agent_message():
    for written in (None, ""):  # no file, or the empty one codex leaves when the API fails
        r = read("codex-json", text("codex", "success.json.stdout"), "", written)
        assert r.message == SHORT


def test_codex_failed_edit_is_only_on_stderr():
    r = report("codex-json", "codex", "failed-edit.json.stdout", "failed-edit.json.stderr",
               "failed-edit.json.last-message.txt")
    assert r.message == SHORT
    # stdout has no item for the patch; stderr: "... ERROR codex_core::tools::router:
    # error=apply_patch verification failed: Failed to find expected lines in <path>:" and "a * b".
    assert r.failures == (
        "apply_patch verification failed: Failed to find expected lines in "
        "/srv/cx/fx/failed-edit.json/work/ws1/repo/src/app.py: a * b",)
    assert r.usage == Usage(input_tokens=2400, output_tokens=160, cost_usd=None, turns=1)
    # Without stderr nothing shows it.
    assert read("codex-json", text("codex", "failed-edit.json.stdout")).failures == ()


def test_codex_nested_sandbox_as_root_cannot_write():
    # codex's own sandbox inside the bot's, as root: the patch verifies but cannot be written.
    r = report("codex-json", "codex", "nested-sandbox-root.json.stdout", "nested-sandbox-root.json.stderr",
               "nested-sandbox-root.json.last-message.txt")
    assert r.message == SHORT
    # stderr: "error=Exit code: 1", "Wall time: 0 seconds", "Output:", "Failed to write file <path>".
    assert r.failures == (
        "Exit code: 1 Wall time: 0 seconds Output: Failed to write file "
        "/srv/cx/fx/nested-sandbox-root.json/work/ws1/repo/src/app.py",)
    assert r.usage == Usage(input_tokens=2400, output_tokens=160, cost_usd=None, turns=1)


def test_codex_nested_sandbox_failure_shows_in_its_events_too():
    # {"type":"item.completed","item":{"id":"item_0","type":"file_change","changes":[{"path":
    # "<path>","kind":"update"}],"status":"failed"}}: read when stderr says nothing.
    r = read("codex-json", text("codex", "nested-sandbox-root.json.stdout"), "",
             text("codex", "nested-sandbox-root.json.last-message.txt"))
    assert r.failures == (
        "file_change failed: /srv/cx/fx/nested-sandbox-root.json/work/ws1/repo/src/app.py",)


# -- Gemini CLI: --output-format json ----------------------------------------------------------------

def test_gemini_success():
    r = report("gemini-json", "gemini", "success.json.stdout", "success.json.stderr")
    assert r.message == SHORT
    assert r.failures == ()
    # stats.models: gemini-3.5-flash-lite (the router) prompt 1200, candidates 80;
    # gemini-3.8-flash prompt 2400, candidates 160; thoughts 0 in both. No cost.
    assert r.usage == Usage(input_tokens=3600, output_tokens=240, cost_usd=None, turns=None)


def test_gemini_failed_edit_is_total_fail_with_stderr_s_line():
    r = report("gemini-json", "gemini", "failed-edit.json.stdout", "failed-edit.json.stderr")
    assert r.message == SHORT
    # "totalFail": 1, and stderr: "Error executing tool replace: Error: Could not find an exact
    # match for old_string in '<path>'."
    assert r.failures == (
        "replace: Error: Could not find an exact match for old_string in "
        "'/work/gemtry/ws/convergebot-fix-yjc3arn2/repo/src/app.py'.",)
    assert r.usage == Usage(input_tokens=3600, output_tokens=240, cost_usd=None, turns=None)


def test_gemini_failed_edit_without_stderr_names_the_tool():
    # "byName": {"replace": {"count": 1, "success": 0, "fail": 1, ...}}
    r = read("gemini-json", text("gemini", "failed-edit.json.stdout"))
    assert r.failures == ("1 tool call(s) failed: replace",)


# -- Copilot CLI: --output-format json, --usage-output-file -----------------------------------------

def test_copilot_success():
    r = report("copilot-json", "copilot", "success.json.stdout", "success.stderr", "success.usage.json")
    assert r.message == LONG
    assert r.failures == ()
    # modelMetrics."gpt-4.1".usage: inputTokens 2400, outputTokens 160, cacheReadTokens 0;
    # its "cost" counts premium requests, not dollars.
    assert r.usage == Usage(input_tokens=2400, output_tokens=160, cost_usd=None, turns=None)


def test_copilot_failed_edit_is_the_unsuccessful_tool_execution():
    r = report("copilot-json", "copilot", "failed-edit.json.stdout", "failed-edit.stderr",
               "failed-edit.usage.json")
    assert r.message == LONG
    # tool.execution_start "toolName":"edit", then tool.execution_complete "success":false,
    # "error":{"message":"No match found","code":"failure"}.
    assert r.failures == ("edit: No match found",)
    assert r.usage == Usage(input_tokens=2400, output_tokens=160, cost_usd=None, turns=None)


def test_copilot_final_message_is_the_last_without_tool_requests():
    # The run also said "Let me fix the subtraction in add()." with its tool call.
    r = report("copilot-json", "copilot", "narration.json.stdout")
    assert r.message == LONG
    assert r.failures == ()
    assert r.usage == Usage()  # no usage file


def test_copilot_api_down_prints_nothing_on_stdout_and_its_last_words_are_the_failure():
    # Exit 1 (docs/fixers.md, "Presets"), so the bot's verdict is a husk by its exit code;
    # the CLI's words are on stderr only.
    r = report("copilot-json", "copilot", "api-down.stdout", "api-down.stderr")
    assert r.message == "" and r.usage == Usage()
    (failure,) = r.failures
    assert failure.startswith("it printed no copilot-json output; its last words: Could not connect "
                              "to local model provider at http://127.0.0.1:18999/v1."), failure


# -- aider: its chat history --------------------------------------------------------------------------

def test_aider_success():
    r = report("aider-history", "aider", "success.stdout", "success.stderr", "success.chat.history.md")
    assert r.message == LONG  # the reply without its SEARCH/REPLACE block
    assert r.failures == ()
    # "> Tokens: 1.2k sent, 80 received. Cost: $0.0048 message, $0.0048 session."
    assert r.usage == Usage(input_tokens=1200, output_tokens=80, cost_usd=0.0048, turns=None)


def test_aider_failed_edit_is_its_reflections_and_giving_up():
    r = report("aider-history", "aider", "failed-edit.stdout", "failed-edit.stderr",
               "failed-edit.chat.history.md")
    # The last of its four replies, not the reflection text aider sent back between them.
    assert r.message == LONG
    # "## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in
    # src/app.py" (four times, kept once) and "> Only 3 reflections allowed, stopping."
    assert r.failures == (
        "SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in src/app.py",
        "Only 3 reflections allowed, stopping.")
    # Four "> Tokens: 1.2k sent, 80 received. Cost: $0.0048 message, ..." lines: each message's
    # cost summed (the session figures, $0.0096, $0.01, $0.02, are rounded).
    assert r.usage == Usage(input_tokens=4800, output_tokens=320, cost_usd=0.0192, turns=None)


def test_aider_api_down_is_litellm_s_error():
    r = report("aider-history", "aider", "api-down.stdout", None, "api-down.chat.history.md")
    # "> litellm.InternalServerError: InternalServerError: OpenAIException - Connection error.",
    # nine times (each retry), kept once; no Tokens line: nothing used, no cost.
    assert r.failures == (
        "litellm.InternalServerError: InternalServerError: OpenAIException - Connection error.",)
    assert r.usage == Usage(input_tokens=0, output_tokens=0, cost_usd=None, turns=None)


def test_aider_api_down_has_no_final_message():
    # The history has no reply after the "#### " line (exit 0, as aider ends an unreachable API:
    # "An unreachable API is exit 0 with no reply"); stdout is aider's banner and retries.
    r = report("aider-history", "aider", "api-down.stdout", None, "api-down.chat.history.md")
    assert r.message == ""
