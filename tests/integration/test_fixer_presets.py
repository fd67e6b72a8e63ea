"""Fixer presets end to end: each agent CLI's stand-in (tests/fixtures/agents/, named like the
real program and first on PATH) run by the `command` fixer in a real clone, pushed to a real
bare repository, its verdict inferred from what it printed and the commit it left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import ConfigError, load_config
from bot.fixers.base import ThreadAction
from bot.fixers.registry import build_fixer
from bot.fixers.sandbox import PRIVATE_DIRS, sandbox_for
from bot.surfaces.serve import build_fixer as serve_build_fixer

from .test_fixer_sandbox import botdir, needs_bwrap  # noqa: F401  (a fixture)
from .test_fixer_support import BRANCH, Remote, git, make_remote, make_request

AGENTS = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
PRESET_NAMES = ("claude-code", "codex", "gemini", "aider", "copilot")
FIXED = "Fixed add() in src/app.py: it subtracted, it adds now."
QUESTION = "Should add() accept floats as well?"


@pytest.fixture
def remote(tmp_path) -> Remote:
    return make_remote(tmp_path / "remote")


@pytest.fixture
def agents() -> Iterator[Path]:
    """The stand-ins' directory where a sandboxed agent can see it: a checkout under /tmp (the
    sandbox gives the agent a private /tmp) has them copied next to the home directory."""
    if not any(AGENTS.is_relative_to(d) for d in PRIVATE_DIRS):
        yield AGENTS
        return
    with tempfile.TemporaryDirectory(dir=Path.home(), prefix=".convergebot-agents-") as d:
        yield Path(shutil.copytree(AGENTS, Path(d) / "agents"))


@pytest.fixture
def record(tmp_path, monkeypatch, agents) -> Path:
    """The stand-ins first on PATH; the file each records what it received in."""
    monkeypatch.setenv("PATH", f"{agents}{os.pathsep}{os.environ['PATH']}")
    path = tmp_path / "record" / "record.json"
    path.parent.mkdir()
    monkeypatch.setenv("STANDIN_RECORD", str(path))
    monkeypatch.setenv("STANDIN_MODE", "edit")
    return path


def fixer(name: str, tmp_path: Path, **kw):
    return build_fixer("command", preset=name, timeout_seconds=30, workdir_root=tmp_path / "work", **kw)


def expected_argv(name: str, seen: dict, *, sandboxed: bool = False) -> list[str]:
    """What each CLI must receive: its unattended flags, the prompt the way it reads it. Codex
    keeps its own sandbox only outside the bot's (as root it cannot start one inside it)."""
    root = Path(seen["cwd"]).parent
    prompt, out = seen["prompt"], root / "agent"
    codex_sandbox = (["--dangerously-bypass-approvals-and-sandbox"] if sandboxed
                     else ["--sandbox", "workspace-write"])
    return {
        "claude-code": ["-p", prompt, "--output-format", "stream-json", "--verbose",
                        "--permission-mode", "acceptEdits"],
        "codex": ["exec", *codex_sandbox, "--json", "--ephemeral", "-c", "analytics.enabled=false",
                  "-c", "features.plugins=false", "--output-last-message", f"{out}/last-message.txt",
                  prompt],
        "gemini": ["-p", prompt, "--approval-mode", "yolo", "--output-format", "json", "--skip-trust"],
        # The findings' files that exist in the clone, in its chat from the start.
        "aider": ["--message-file", str(root / "prompt.md"), "--yes-always", "--no-auto-commits",
                  "--no-pretty", "--no-stream", "--no-gitignore", "--no-check-update", "--no-analytics",
                  "--no-show-model-warnings", "--no-show-release-notes",
                  "--input-history-file", f"{out}/aider.input.history",
                  "--chat-history-file", f"{out}/aider.chat.history.md", "src/app.py", "src/util.py"],
        "copilot": ["-p", prompt, "--allow-all-tools", "--no-ask-user", "--no-auto-update",
                    "--output-format", "json", "--usage-output-file", f"{out}/usage.json"],
    }[name]


@pytest.mark.parametrize("name", PRESET_NAMES)
async def test_a_preset_runs_its_cli_unattended_and_its_fix_is_pushed_as_addressed(
    name, remote, record, tmp_path
):
    verdict = await fixer(name, tmp_path).run(make_request(remote))

    seen = json.loads(record.read_text())
    assert seen["argv"] == expected_argv(name, seen)
    assert seen["allowed"] is True
    # The prompt reached it whole, the way that CLI reads it (an argument, or aider's file).
    assert seen["prompt_via"] == ("file" if name == "aider" else "argument")
    assert "add() subtracts" in seen["prompt"] and "keep the public API unchanged" in seen["prompt"]
    assert seen["stdin"] == ""
    head = remote.head()
    assert head != remote.entry_head and verdict.pushed_head == head
    assert remote.show(head, "src/app.py") == "def add(a, b):\n    return a + b"
    # Its caches and histories are not work: none is committed, no .gitignore is touched.
    assert git("ls-tree", "-r", "--name-only", head, cwd=remote.bare).split() == [
        "README.md", "src/app.py", "src/util.py"]
    assert (verdict.status, verdict.finished, verdict.summary) == ("addressed", True, FIXED)
    # The commit changed the first finding's file only: that thread is answered, the other is not.
    # A guess, marked so: it answers this round's thread but settles nothing for later rounds.
    assert verdict.thread_actions == (ThreadAction("PRRT_1", "fixed", "changed in this commit", inferred=True),)


@pytest.mark.parametrize("name", PRESET_NAMES)
async def test_a_preset_run_that_changes_nothing_and_says_so_is_converged(
    name, remote, record, tmp_path, monkeypatch
):
    monkeypatch.setenv("STANDIN_MODE", "noop")
    verdict = await fixer(name, tmp_path).run(make_request(remote))

    assert (verdict.status, verdict.finished, verdict.pushed_head) == ("converged", True, None)
    assert "no changes are needed" in verdict.summary
    assert verdict.thread_actions == ()
    assert remote.head() == remote.entry_head


@pytest.mark.parametrize("name", PRESET_NAMES)
async def test_a_preset_run_that_asks_a_question_needs_input(
    name, remote, record, tmp_path, monkeypatch
):
    monkeypatch.setenv("STANDIN_MODE", "ask")
    verdict = await fixer(name, tmp_path).run(make_request(remote))

    assert (verdict.status, verdict.question) == ("needs_input", QUESTION)
    assert verdict.pushed_head is None and remote.head() == remote.entry_head


@pytest.mark.parametrize("name", PRESET_NAMES)
async def test_a_verdict_line_the_agent_printed_wins_over_the_inference(
    name, remote, record, tmp_path, monkeypatch
):
    # Inside the final message each CLI reports: Claude's `result`, codex's last-message file,
    # Gemini's `response`, copilot's last `assistant.message`, aider's last reply.
    monkeypatch.setenv("STANDIN_MODE", "verdict")
    verdict = await fixer(name, tmp_path).run(make_request(remote))

    assert (verdict.status, verdict.question, verdict.summary) == (
        "needs_input", "Which rounding mode does the project use?", "asked")


def cli_failure(name: str, seen: dict) -> str:
    """What each CLI reports of the stand-in's failed edit (its old text, `a * b`, is not in
    src/app.py), as bot/fixers/reports.py reads it: the real CLIs' words, where they put them."""
    app = f"{seen['cwd']}/src/app.py"
    return {
        # A tool_result with is_error in the stream; the result object says success.
        "claude-code": "String to replace not found in file. String: a * b",
        # No event at all on stdout: only the ERROR line on stderr.
        "codex": f"apply_patch verification failed: Failed to find expected lines in {app}: a * b",
        # stats.tools.totalFail, and the line on stderr.
        "gemini": f"replace: Error: Could not find an exact match for old_string in '{app}'.",
        # A tool.execution_complete with success false.
        "copilot": "edit: No match found",
        # The reflections in its chat history, and its giving up.
        "aider": "SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in "
                 "src/app.py; Only 3 reflections allowed, stopping.",
    }[name]


@pytest.mark.parametrize("name", PRESET_NAMES)
async def test_an_edit_the_cli_failed_to_apply_is_no_progress_with_the_cli_s_words(
    name, remote, record, tmp_path, monkeypatch
):
    # The CLI exits 0 and its final message claims the fix; what it reported, and the unchanged
    # tree, say otherwise.
    monkeypatch.setenv("STANDIN_MODE", "failed")
    verdict = await fixer(name, tmp_path).run(make_request(remote))

    seen = json.loads(record.read_text())
    reported = cli_failure(name, seen)
    assert (verdict.finished, verdict.pushed_head, verdict.status) == (True, None, "addressed")
    assert verdict.summary.startswith("the agent changed nothing: its CLI reported "), verdict.summary
    assert reported in verdict.summary
    assert verdict.summary.endswith(f"Its final message: {FIXED}")
    assert verdict.failure == f"its CLI reported {reported}"
    assert verdict.thread_actions == () and verdict.question is None
    assert remote.head() == remote.entry_head


# Tokens in, tokens out, and dollars where the CLI reports them (Claude Code and aider); the
# other CLIs report tokens only, which the bot prices from its config.
EXPENSIVE = {"STANDIN_INPUT_TOKENS": "2000000", "STANDIN_OUTPUT_TOKENS": "30000", "STANDIN_COST_USD": "7.5"}
REPORTS_COST = {"claude-code": 7.5, "aider": 7.5}


@pytest.mark.parametrize("name", PRESET_NAMES)
async def test_the_verdict_carries_what_the_cli_reported_it_used(name, remote, record, tmp_path, monkeypatch):
    for key, value in EXPENSIVE.items():
        monkeypatch.setenv(key, value)
    verdict = await fixer(name, tmp_path).run(make_request(remote))

    assert verdict.pushed_head == remote.head() != remote.entry_head
    usage = verdict.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (2_000_000, 30_000)
    assert usage.cost_usd == REPORTS_COST.get(name)
    assert usage.seconds > 0


async def test_preset_args_are_passed_and_a_flag_the_cli_refuses_makes_a_husk(remote, record, tmp_path):
    verdict = await fixer("codex", tmp_path, preset_args=["--model", "o4"]).run(make_request(remote))
    seen = json.loads(record.read_text())
    assert seen["argv"][-3:] == ["--model", "o4", seen["prompt"]]  # before codex's prompt
    assert verdict.pushed_head == remote.head()

    record.unlink()
    verdict = await fixer("claude-code", tmp_path, preset_args=["--no-such-flag"]).run(
        make_request(remote, entry_head=remote.head()))
    assert (verdict.finished, verdict.detail, verdict.pushed_head) == (False, "exit code 2", None)
    assert not record.exists()  # refused before it did anything


async def test_a_crashed_cli_is_a_husk_and_pushes_nothing(remote, record, tmp_path, monkeypatch):
    monkeypatch.setenv("STANDIN_MODE", "crash")
    verdict = await fixer("gemini", tmp_path).run(make_request(remote))
    assert (verdict.finished, verdict.detail, verdict.pushed_head) == (False, "exit code 3", None)
    assert remote.head() == remote.entry_head


async def test_command_overrides_only_the_program_path(remote, record, tmp_path):
    verdict = await fixer("copilot", tmp_path, argv=[str(AGENTS / "copilot")]).run(make_request(remote))
    assert json.loads(record.read_text())["argv"][0] == "-p"
    assert verdict.pushed_head == remote.head()


def test_serve_refuses_a_preset_with_a_full_command_in_one_line(tmp_path):
    f = tmp_path / "convergebot.toml"
    f.write_text('[fixer]\nkind = "command"\npreset = "claude-code"\ncommand = ["claude", "-p"]\n'
                 'sandbox = "off"\n')
    with pytest.raises(ConfigError, match="names only the program.*fixer.preset_args"):
        serve_build_fixer(load_config(f, env={}))
    f.write_text('[fixer]\nkind = "mention"\npreset = "codex"\n')
    with pytest.raises(ConfigError, match='fixer.preset is for kind = "command"'):
        serve_build_fixer(load_config(f, env={}))
    f.write_text('[fixer]\nkind = "command"\npreset = "cursor"\n')
    with pytest.raises(ConfigError, match="fixer.preset"):
        load_config(f, env={})


@needs_bwrap
async def test_a_cli_installed_under_tmp_runs_whole_inside_the_sandbox(remote, record, tmp_path, monkeypatch):
    # An npm install under /tmp (which the sandbox replaces with a private one): the program
    # alone would start and find none of its code (here: the stand-in's module beside it).
    bin_dir = tmp_path / "npm" / "node_modules" / ".bin"
    shutil.copytree(AGENTS, bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    sandbox = sandbox_for("bwrap", write=[record.parent])
    verdict = await fixer("claude-code", tmp_path, sandbox=sandbox).run(make_request(remote))

    assert json.loads(record.read_text())["program"] == "claude"
    assert (verdict.status, verdict.finished, verdict.summary) == ("addressed", True, FIXED)
    assert verdict.pushed_head == remote.head() != remote.entry_head


@needs_bwrap
@pytest.mark.parametrize("name", PRESET_NAMES)
async def test_a_preset_runs_inside_the_bubblewrap_sandbox(name, remote, record, tmp_path):
    # The stand-in is on PATH in the repository (readable, read-only); its record directory is a
    # `sandbox_write` path; codex's last-message file, aider's histories and copilot's usage file
    # go to {out_dir}.
    sandbox = sandbox_for("bwrap", write=[record.parent])
    verdict = await fixer(name, tmp_path, sandbox=sandbox).run(make_request(remote))

    seen = json.loads(record.read_text())
    assert seen["argv"] == expected_argv(name, seen, sandboxed=True)
    assert (verdict.status, verdict.summary) == ("addressed", FIXED)
    assert verdict.pushed_head == remote.head() != remote.entry_head
    # A guess, marked so: it answers this round's thread but settles nothing for later rounds.
    assert verdict.thread_actions == (ThreadAction("PRRT_1", "fixed", "changed in this commit", inferred=True),)



async def test_doctor_checks_the_presets_program_is_on_path(tmp_path, monkeypatch):
    from bot.surfaces.doctor import run_doctor

    async def doctor(path: str) -> list[str]:
        monkeypatch.setenv("PATH", path)
        config = load_config(env={
            "CONVERGEBOT_DATABASE_URL": f"sqlite:///{tmp_path / 'd.db'}",
            "CONVERGEBOT_GITHUB_API_URL": "http://127.0.0.1:9/",
            "CONVERGEBOT_FIXER_KIND": "command", "CONVERGEBOT_FIXER_PRESET": "gemini"})
        lines: list[str] = []
        await run_doctor(config, lines.append)
        return lines

    base = os.environ["PATH"]
    lines = await doctor(f"{AGENTS}{os.pathsep}{base}")
    assert [line for line in lines if "fixer command" in line] == [
        f"[ok  ] fixer command (preset gemini): {AGENTS / 'gemini'}"]
    # It ran the program: the stand-in answers --version as the real CLI does.
    assert "[ok  ] gemini version: 0.61.0" in lines
    # Its state directory (not made by the doctor), its key (a warning: it may be logged in).
    state = Path.home() / ".gemini"
    assert [line for line in lines if " state /" in line] == [
        f"[ok  ] gemini state {state}: " + ("writable" if state.exists() else "missing; serve creates it at start")]
    if not any(os.environ.get(k) for k in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS")):
        assert any(line.startswith("[warn] gemini model key: none of GEMINI_API_KEY") for line in lines), lines
    lines = await doctor(str(tmp_path))
    assert [line for line in lines if "fixer command" in line] == [
        "[FAIL] fixer command (preset gemini): gemini not found on PATH: install it, or name its "
        "path in fixer.command"]


@needs_bwrap
def test_serve_builds_a_sandboxed_preset_fixer_from_the_config_file(botdir, remote, agents):  # noqa: F811
    # The config as an operator writes it, read by a process standing in for `serve`
    # (tests/integration/fixer_bot.py): the preset's program found on PATH, run in bubblewrap.
    record = botdir / "out" / "record.json"
    record.parent.mkdir()
    (botdir / "convergebot.toml").write_text(textwrap.dedent(f"""
        [fixer]
        kind = "command"
        preset = "claude-code"
        preset_args = ["--model", "sonnet"]
        sandbox = "bwrap"
        sandbox_write = [{json.dumps(str(record.parent))}]
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    env.update(PYTHONPATH=str(AGENTS.parents[2]), PATH=f"{agents}{os.pathsep}{env['PATH']}",
               STANDIN_RECORD=str(record), STANDIN_MODE="edit")
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.fixer_bot", remote.url, BRANCH, remote.entry_head],
        cwd=botdir, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout.strip().splitlines()[-1])

    seen = json.loads(record.read_text())
    assert seen["argv"] == [*expected_argv("claude-code", seen), "--model", "sonnet"]
    assert (verdict["status"], verdict["summary"]) == ("addressed", FIXED)
    assert verdict["pushed_head"] == remote.head() != remote.entry_head
    # The bot's PATH reached the agent inside the sandbox: its own tools are found there too.
    assert str(agents) in seen["path_env"]
