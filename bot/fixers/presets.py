"""Presets of the `command` fixer: the agent CLIs people run, each with its unattended argv.

A preset saves the operator from writing the argv and the agent from knowing the verdict
protocol: the CLI runs as it would in a terminal, and the bot reads its final message and the
commit it left (bot/fixers/agent_wrapper.py), and what went wrong and what it spent from its
report (bot/fixers/reports.py). Every flag, state directory and output format here was shown
on the real CLI, at the version tests/agents/pins.toml names, by `make agents`.

Placeholders besides the `command` fixer's own: `{prompt}` is the prompt's text (an argument
of its own, never re-substituted), `{out_dir}` a directory outside the clone that the agent may
write (its last-message file, its histories) and the bot reads afterwards, and `{preset_args}`
marks where `[fixer] preset_args` go (at the end when a preset does not say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROMPT = "{prompt}"
OUT_DIR = "{out_dir}"
EXTRA = "{preset_args}"
# The files the round's findings name that exist in the clone, each an argument of its own.
FINDING_FILES = "{finding_files}"
SANDBOX_ARGS = "{sandbox_args}"

@dataclass(frozen=True)
class Preset:
    name: str
    program: str
    args: tuple[str, ...]
    output: str  # how its report is read: a format of bot/fixers/reports.py
    message_file: str = ""  # in {out_dir}: where the CLI writes its final message or transcript
    # Files the CLI leaves in its working directory that are not work (its caches, histories):
    # written to the clone's .git/info/exclude, so the bot's commit of what is left skips them.
    ignore: tuple[str, ...] = ()
    # Where the CLI keeps its state, relative to the home directory: created if missing and
    # writable inside the sandbox (nothing else of the home is).
    state: tuple[str, ...] = ()
    # The environment variables that can carry its model's key (any one will do; a CLI logged
    # in through its state directory needs none).
    keys: tuple[str, ...] = ()
    # Set for every run unless the bot's environment sets them: unattended defaults (no update
    # check, no telemetry, the clone trusted).
    env: tuple[tuple[str, str], ...] = ()
    # Its flags at `{sandbox_args}`: with the bot's sandbox around it, and without.
    sandboxed: tuple[str, ...] = ()
    unsandboxed: tuple[str, ...] = ()

    def argv(self, program: str | None = None, extra: Sequence[str] = (), *, sandboxed: bool = True) -> list[str]:
        args = list(self.args) if EXTRA in self.args else [*self.args, EXTRA]
        at = args.index(EXTRA)
        out = [program or self.program, *args[:at], *extra, *args[at + 1:]]
        if SANDBOX_ARGS in out:
            at = out.index(SANDBOX_ARGS)
            out[at:at + 1] = self.sandboxed if sandboxed else self.unsandboxed
        return out

    def state_paths(self, home: Path | None = None) -> tuple[Path, ...]:
        base = home if home is not None else Path.home()
        return tuple(base / rel for rel in self.state)


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        # `-p` runs once and exits; the prompt is its argument. acceptEdits lets it edit files
        # without asking (a shell command it was not allowed stays denied: add
        # `--allowedTools` in preset_args for a test runner). stream-json (which needs
        # --verbose) prints every message, so a tool call that failed shows (the plain JSON
        # result reads as a success), and ends with the same result object: final message,
        # cost, turns. Its non-essential traffic (update checks, telemetry) is turned off.
        Preset("claude-code", "claude",
               ("-p", PROMPT, "--output-format", "stream-json", "--verbose", "--permission-mode",
                "acceptEdits"),
               output="claude-stream", state=(".claude",),
               keys=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
               env=(("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),)),
        # `exec` is the non-interactive subcommand and never asks for approval. Inside the bot's
        # sandbox codex's own cannot start as root (bwrap's uid map is refused) and every edit
        # fails, so it runs without its own there; unsandboxed it keeps it (workspace-write: edits
        # in its working directory only). --json prints its events (failed file changes, token
        # counts), --output-last-message writes its final message to a file. The two -c keys
        # stop its calls home at each start (the plugin list from GitHub, analytics);
        # --ephemeral keeps no transcript in ~/.codex/sessions.
        Preset("codex", "codex",
               ("exec", SANDBOX_ARGS, "--json", "--ephemeral", "-c", "analytics.enabled=false",
                "-c", "features.plugins=false", "--output-last-message",
                f"{OUT_DIR}/last-message.txt", EXTRA, PROMPT),
               output="codex-json", message_file="last-message.txt", state=(".codex",),
               keys=("OPENAI_API_KEY", "CODEX_API_KEY"),
               sandboxed=("--dangerously-bypass-approvals-and-sandbox",),
               unsandboxed=("--sandbox", "workspace-write")),
        # `-p` is headless mode; yolo approves every tool call (there is no one to ask), and
        # only in a trusted folder: a fresh clone is not one until --skip-trust says so.
        Preset("gemini", "gemini",
               ("-p", PROMPT, "--approval-mode", "yolo", "--output-format", "json", "--skip-trust"),
               output="gemini-json", state=(".gemini",),
               keys=("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS"),
               env=(("GEMINI_TELEMETRY_ENABLED", "false"),)),
        # --message-file reads the prompt from the file and exits after one reply; its chat
        # history (Markdown: `#### ` before each user line, `> ` before its own notes) holds the
        # replies, their edit blocks, the failed matches and the token counts. It edits only
        # the files in its chat: the findings' files are given to it from the start. --yes-always
        # answers every prompt yes, so the prompts that would opt in to analytics or warn about
        # the model are turned off first. Its price list is read locally (no fetch each start).
        Preset("aider", "aider",
               ("--message-file", "{prompt_file}", "--yes-always", "--no-auto-commits",
                "--no-pretty", "--no-stream", "--no-gitignore", "--no-check-update", "--no-analytics",
                "--no-show-model-warnings", "--no-show-release-notes",
                "--input-history-file", f"{OUT_DIR}/aider.input.history",
                "--chat-history-file", f"{OUT_DIR}/aider.chat.history.md", EXTRA, FINDING_FILES),
               output="aider-history", message_file="aider.chat.history.md", ignore=(".aider*",),
               state=(".aider",),
               keys=("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY",
                     "DEEPSEEK_API_KEY"),
               env=(("LITELLM_LOCAL_MODEL_COST_MAP", "True"),)),
        # `-p` runs the prompt and exits; --allow-all-tools runs tools without asking and
        # --no-ask-user keeps it from pausing. Its JSON events hold the final message and every
        # tool call's result (-s would print every assistant text, and no failure); the usage
        # file its token counts. COPILOT_OFFLINE keeps it off GitHub with a model provider of
        # your own (docs/fixers.md).
        Preset("copilot", "copilot",
               ("-p", PROMPT, "--allow-all-tools", "--no-ask-user", "--no-auto-update",
                "--output-format", "json", "--usage-output-file", f"{OUT_DIR}/usage.json"),
               output="copilot-json", message_file="usage.json", state=(".copilot", ".cache/copilot"),
               keys=("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_PROVIDER_BASE_URL")),
    )
}


def program(command: Sequence[str], preset: str) -> str:
    """The program the `command` fixer runs: the command's first item (with a preset, the CLI's
    path), else the preset's CLI; "" when neither is set."""
    if command:
        return command[0]
    return PRESETS[preset].program if preset in PRESETS else ""


def resolve(name: str, command: Sequence[str] = (), preset_args: Sequence[str] = (), *,
            sandboxed: bool = True) -> tuple[list[str], Preset]:
    """The argv `[fixer] preset = name` runs, and its preset. `command`, when given, is only the
    program's path (one item); raises ValueError naming the mistake otherwise."""
    preset = PRESETS.get(name)
    if preset is None:
        raise ValueError(f"unknown fixer preset {name!r}: expected one of {', '.join(sorted(PRESETS))}")
    if isinstance(command, str):
        command = [command] if command else []
    if len(command) > 1:
        raise ValueError(
            f"fixer.command with preset {name!r} names only the program (e.g. [\"/opt/bin/"
            f"{preset.program}\"]); put extra flags in fixer.preset_args")
    if not all(isinstance(a, str) for a in preset_args):
        raise ValueError("fixer.preset_args must be a list of strings")
    return preset.argv(command[0] if command else None, preset_args, sandboxed=sandboxed), preset
