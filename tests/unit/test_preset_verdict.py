"""The verdict a preset's run gets when the agent printed none (bot/fixers/agent_wrapper.py)."""

from __future__ import annotations

import json

import pytest

from bot.fixers.agent_wrapper import (
    infer_verdict,
    question_in,
    says_nothing_needed,
    singled_out,
)
from bot.fixers.presets import PRESETS, resolve
from bot.fixers.reports import read
from bot.fixers.verdict import TEXT_CAP, normalize
from bot.rules.model import Finding

APP = Finding("PRRT_1", 1, "src/app.py", 2, "add() subtracts", "copilot", "fp-1")
UTIL = Finding("PRRT_2", 2, "src/util.py", 1, "X needs a docstring", "alice", "fp-2")
BODY = Finding(None, None, None, None, "Please add tests", "bob", "fp-3")


def final_message(output: str, stdout: str, written: str | None = None) -> str:
    return read(output, stdout, "", written).message


def verdict(message: str, **kw):
    return normalize(infer_verdict(message, **kw), finished=True)


# --- status


def test_a_change_is_addressed_with_the_message_as_summary():
    v = verdict("Fixed add().", changed=True)
    assert (v.status, v.summary, v.question) == ("addressed", "Fixed add().", None)


@pytest.mark.parametrize("message", [
    "No changes are needed: add() already handles it.",
    "Nothing to change here.",
    "The empty list is already handled in mean().",
    "This was already fixed in the previous commit.",
    "The code doesn't need any changes.",
    "No fix is required.",
])
def test_no_change_and_a_message_saying_nothing_was_needed_is_converged(message):
    assert says_nothing_needed(message)
    assert verdict(message, changed=False).status == "converged"


def test_no_change_without_saying_so_is_addressed_the_finished_no_advance():
    v = verdict("I looked at the code.", changed=False)
    assert (v.status, v.finished, v.thread_actions) == ("addressed", True, ())


def test_saying_nothing_was_needed_while_changing_files_is_still_addressed():
    # The commit is what counts: it is pushed and reviewed.
    assert verdict("Fixed it; nothing else to change.", changed=True).status == "addressed"


def test_a_question_without_a_change_needs_input_with_that_question():
    v = verdict("I need a decision first.\nShould add() accept floats?\n", changed=False)
    assert (v.status, v.question) == ("needs_input", "Should add() accept floats?")


def test_a_marked_question_counts_even_after_a_change():
    v = verdict("Fixed add().\nQuestion: keep the old name as an alias", changed=True)
    assert (v.status, v.question) == ("needs_input", "keep the old name as an alias")


def test_a_courtesy_offer_is_no_question():
    assert question_in("Fixed add().\nWould you like me to add tests too?", changed=True) is None
    assert question_in("I changed nothing.\nLet me know if you want more?", changed=False) is None
    assert verdict("Fixed add().\nWould you like me to add tests too?", changed=True).status == "addressed"


def test_after_a_change_only_a_blocking_question_counts():
    assert question_in("Fixed add(). Is the name fine?", changed=True) is None
    assert question_in("Fixed add().\nBefore I can finish: is the name fine?", changed=True) == (
        "Before I can finish: is the name fine?")


def test_the_question_and_summary_are_capped_like_any_verdict():
    # The message is read from its last TEXT_CAP characters: a question asked there is found.
    long = "x" * (TEXT_CAP + 50)
    v = verdict(f"{long}\nQuestion: {'y' * (TEXT_CAP - 20)}?", changed=False)
    assert len(v.summary) == TEXT_CAP and v.question.startswith("yyy") and v.question.endswith("?")


# --- threads


def test_a_pushed_change_answers_the_threads_whose_files_it_changed():
    v = verdict("Fixed add().", changed=True, findings=(APP, UTIL, BODY),
                changed_files=["src/app.py"])
    assert [(a.thread_id, a.action) for a in v.thread_actions] == [("PRRT_1", "fixed")]


def test_a_thread_the_message_says_was_left_undone_is_not_answered():
    message = "Fixed add() in src/app.py. I did not add the docstring in util.py, it is out of scope."
    assert singled_out(message, UTIL) and not singled_out(message, APP)
    v = verdict(message, changed=True, findings=(APP, UTIL),
                changed_files=["src/app.py", "src/util.py"])
    assert [a.thread_id for a in v.thread_actions] == ["PRRT_1"]


def test_nothing_pushed_answers_no_thread():
    # A rejected or withheld push has no file list: no thread is claimed fixed.
    assert verdict("Fixed.", changed=True, findings=(APP,), changed_files=None).thread_actions == ()


def test_a_question_answers_no_thread():
    v = verdict("Question: which file?", changed=True, findings=(APP,), changed_files=["src/app.py"])
    assert v.status == "needs_input" and v.thread_actions == ()


# --- final messages


def test_claude_codes_json_result_is_the_message():
    out = "warming up\n" + json.dumps({"type": "result", "is_error": False, "result": " Fixed. "})
    assert final_message("claude-stream", out) == "Fixed."


def test_gemini_clis_pretty_printed_json_response_is_the_message():
    out = "Loaded cached credentials.\n" + json.dumps({"response": "Done.", "stats": {}}, indent=2)
    assert final_message("gemini-json", out) == "Done."


def test_a_message_file_wins_over_stdout_and_an_empty_one_falls_back():
    events = json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": "event text"}})
    assert final_message("codex-json", events, "file text\n") == "file text"
    assert final_message("codex-json", events, "  ") == "event text"
    assert final_message("codex-json", "stdout text", None) == ""  # no event, no file: no message


def test_aiders_last_reply_comes_from_its_chat_history():
    # The one user message (--message-file) is the first run of `#### ` lines; a `#### `
    # heading of the reply's own stays in the reply.
    history = "# aider chat started\n\n#### fix add\n#### please\n\nold reply\n\n" \
              "> Tokens: 2k sent, 80 received.\n\n#### Done\nFixed add().\n\n> Tokens: 2k sent, 80 received.\n"
    assert final_message("aider-history", "Aider v0\nbanner", history) == "#### Done\nFixed add()."


def test_output_not_in_the_cli_s_format_is_no_message_and_its_last_words_a_failure():
    report = read("claude-stream", "not json at all", "Error: the API said no\n")
    assert report.message == ""
    assert report.failures == ("it printed no claude-stream output; its last words: Error: the API said no",)
    # A CLI with no format of its own: its answer is the tail of what it printed.
    assert len(final_message("stdout", "y" * 10_000)) == TEXT_CAP


# --- presets


def test_every_preset_argv_has_its_prompt_and_extra_flags_go_where_it_says():
    for preset in PRESETS.values():
        argv = preset.argv()
        assert argv[0] == preset.program
        assert "{prompt}" in argv or "{prompt_file}" in argv
    argv, _ = resolve("codex", ["/opt/codex"], ["--model", "o4"])
    assert argv[0] == "/opt/codex" and argv[-3:] == ["--model", "o4", "{prompt}"]
    argv, _ = resolve("claude-code", (), ["--model", "opus"])
    assert argv[-2:] == ["--model", "opus"]


def test_a_preset_refuses_a_full_command_and_an_unknown_name():
    with pytest.raises(ValueError, match="names only the program"):
        resolve("claude-code", ["claude", "-p"])
    with pytest.raises(ValueError, match="unknown fixer preset 'cursor'"):
        resolve("cursor")


# --- hostile output: bounded time and memory on the 1 MiB an agent's output is capped at


def _bounded(call) -> tuple[float, int]:
    import time
    import tracemalloc
    tracemalloc.start()
    started = time.monotonic()
    try:
        call()
        return time.monotonic() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_stdout_of_brace_lines_is_parsed_in_bounded_time_and_memory():
    # Every line starts with `{`: each was once tried as the start of a block, a copy of the
    # rest of stdout (about 4.6 s and 700 MB for 60 KB; 1 MiB killed the bot).
    stdout = "{x\n" * (1024 * 1024 // 3)
    seconds, peak = _bounded(lambda: final_message("claude-stream", stdout))
    assert seconds < 5 and peak < 50 * 1024 * 1024, (seconds, peak)


def test_a_result_after_a_mib_of_brace_lines_is_still_found():
    stdout = "{x\n" * 300_000 + json.dumps({"type": "result", "result": "Done."})
    assert final_message("claude-stream", stdout) == "Done."


@pytest.mark.parametrize("message", ["\n" * (1024 * 1024), " \n" * (512 * 1024), "?\n" * (512 * 1024)])
def test_a_mib_message_is_read_in_bounded_time(message):
    seconds, peak = _bounded(lambda: (question_in(message, False),
                                      infer_verdict(message, changed=True, findings=[APP, UTIL],
                                                    changed_files=["src/app.py"])))
    assert seconds < 5 and peak < 50 * 1024 * 1024, (seconds, peak)


def test_a_mib_result_is_cut_to_the_tail_before_it_is_read():
    result = "Question: which one?\n" + "x" * (1024 * 1024) + "\nDone."
    message = final_message("claude-stream", json.dumps({"result": result}))
    assert len(message) <= TEXT_CAP and message.endswith("Done.")
