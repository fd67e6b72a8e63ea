"""Running git: asyncio subprocesses with a deadline, errors that carry no secret."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bot.fixers.environment import scrub
from bot.fixers.process import ProcessResult, run_process


class GitError(Exception):
    """A git step failed; the message is short and free of credentials."""


@dataclass(frozen=True)
class Git:
    env: Mapping[str, str] = field(repr=False)
    timeout: float
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # Turns git's argv into the one to run (inside a sandbox, say); None runs git itself.
    wrap: Callable[[Sequence[str]], list[str]] | None = field(default=None, repr=False)

    async def call(self, *args: str, cwd: Path) -> ProcessResult:
        argv = ["git", *args]
        if self.wrap is not None:
            argv = self.wrap(argv)
        try:
            return await run_process(argv, cwd=cwd, env=self.env, timeout=self.timeout)
        except OSError as e:
            raise GitError(f"git could not start: {e.strerror or e}") from None

    async def run(self, *args: str, cwd: Path) -> str:
        """Stdout, stripped; GitError when git fails or overruns its deadline."""
        result = await self.call(*args, cwd=cwd)
        if not result.ok:
            raise GitError(self.failure(_subcommand(args), result))
        return result.stdout.strip()

    def failure(self, step: str, result: ProcessResult) -> str:
        lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
        why = scrub(lines[-1], self.secrets)[:300] if lines else ""
        return f"git {step} failed ({result.describe()})" + (f": {why}" if why else "")


async def check_branch(git: Git, branch: str, cwd: Path, what: str = "branch name") -> None:
    """GitError unless `branch` is a branch name by git's own rule (`check-ref-format`)."""
    if not (await git.call("check-ref-format", f"refs/heads/{branch}", cwd=cwd)).ok:
        raise GitError(f"refusing {what} {branch!r}")


def _subcommand(args: tuple[str, ...]) -> str:
    """`commit` of `-c k=v -c k=v commit ...`."""
    i = 0
    while i < len(args) - 1 and args[i] == "-c":
        i += 2
    return args[i] if args else "git"
