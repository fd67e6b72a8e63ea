"""Presets of the `command` fixer: the agent CLIs people run, each with its unattended argv.

A preset saves the operator from writing the argv and the agent from knowing the verdict
protocol: the CLI runs as it would in a terminal, and the bot reads its final message and the
commit it left (bot/fixers/agent_wrapper.py). The flags were read from each CLI's documentation;
the ones that documentation did not settle are named in `unconfirmed` and in docs/fixers.md.

Placeholders besides the `command` fixer's own: `{prompt}` is the prompt's text (an argument
of its own, never re-substituted), `{out_dir}` a directory outside the clone that the agent may
write (its last-message file, its histories) and the bot reads afterwards, and `{preset_args}`
marks where `[fixer] preset_args` go (at the end when a preset does not say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PROMPT = "{prompt}"
OUT_DIR = "{out_dir}"
EXTRA = "{preset_args}"

# How the final message is read: the `result` of Claude Code's JSON, the `response` of Gemini
# CLI's, the file the CLI wrote (`message_file`), the last reply in aider's chat history file,
# or the tail of standard output.
OUTPUTS = ("claude-json", "gemini-json", "file", "aider-history", "stdout")


@dataclass(frozen=True)
class Preset:
    name: str
    program: str
    args: tuple[str, ...]
    output: str
    message_file: str = ""  # in {out_dir}: where the CLI writes its final message or transcript
    # Files the CLI leaves in its working directory that are not work (its caches, histories):
    # written to the clone's .git/info/exclude, so the bot's commit of what is left skips them.
    ignore: tuple[str, ...] = ()
    unconfirmed: tuple[str, ...] = ()

    def argv(self, program: str | None = None, extra: Sequence[str] = ()) -> list[str]:
        args = list(self.args) if EXTRA in self.args else [*self.args, EXTRA]
        at = args.index(EXTRA)
        return [program or self.program, *args[:at], *extra, *args[at + 1:]]


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        # `-p` runs once and exits; the prompt is its argument. acceptEdits lets it edit files
        # without asking (a shell command it was not allowed stays denied: add
        # `--allowedTools` in preset_args for a test runner).
        Preset("claude-code", "claude",
               ("-p", PROMPT, "--output-format", "json", "--permission-mode", "acceptEdits"),
               output="claude-json"),
        # `exec` is the non-interactive subcommand and never asks for approval; workspace-write
        # lets it edit its working directory; -o writes its final message to a file.
        Preset("codex", "codex",
               ("exec", "--sandbox", "workspace-write", "--output-last-message",
                f"{OUT_DIR}/last-message.txt", EXTRA, PROMPT),
               output="file", message_file="last-message.txt",
               unconfirmed=("codex's own sandbox (workspace-write) nested inside bubblewrap",)),
        # `-p` is headless mode; yolo approves every tool call (there is no one to ask).
        Preset("gemini", "gemini",
               ("-p", PROMPT, "--approval-mode", "yolo", "--output-format", "json"),
               output="gemini-json"),
        # --message-file reads the prompt from the file and exits after one reply; its chat
        # history (Markdown: `#### ` before each user line, `> ` before tool output) holds the
        # reply without the banner and token counts of its standard output.
        Preset("aider", "aider",
               ("--message-file", "{prompt_file}", "--yes-always", "--no-auto-commits",
                "--no-pretty", "--no-stream", "--no-gitignore", "--no-check-update",
                "--input-history-file", f"{OUT_DIR}/aider.input.history",
                "--chat-history-file", f"{OUT_DIR}/aider.chat.history.md"),
               output="aider-history", message_file="aider.chat.history.md", ignore=(".aider*",),
               unconfirmed=("--no-gitignore", "--no-check-update")),
        # `-p` runs the prompt and exits; -s prints only the agent's answer;
        # --allow-all-tools runs tools without asking; --no-ask-user keeps it from pausing.
        Preset("copilot", "copilot",
               ("-p", PROMPT, "-s", "--allow-all-tools", "--no-ask-user"),
               output="stdout"),
    )
}


def resolve(name: str, command: Sequence[str] = (), preset_args: Sequence[str] = ()) -> tuple[list[str], Preset]:
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
    return preset.argv(command[0] if command else None, preset_args), preset
