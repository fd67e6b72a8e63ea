"""The `command` fixer: a configured CLI (a coding agent) run in a fresh clone of the PR branch.

Only the agent's command runs untrusted. The bot clones with the token before it; after it,
the bot's commit of what the agent left runs in the same sandbox, and the push with the token
runs outside it, in a repository the agent never touched (bot/fixers/workspace.py).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from bot.logs import get_logger

from .base import FixRequest, Verdict, husk
from .environment import GitIdentity, fixer_env, scrub, secret_forms
from .git import GitError
from .process import run_process
from .prompt import render_findings, render_prompt
from .sandbox import Sandbox
from .verdict import normalize, parse_verdict
from .workspace import Workspace, commit_message

log = get_logger(__name__)

DEFAULT_GIT_TIMEOUT_SECONDS = 300.0


class CommandFixer:
    """Runs `argv` with cwd = the clone; `{prompt_file}`, `{findings_file}` and `{repo_dir}` in
    argv items are replaced by paths. The command's verdict is its last JSON line on stdout.

    With a `sandbox` the command runs inside it (bot/fixers/sandbox.py); without one it can
    read whatever the bot's user can. `serve` picks it from `fixer.sandbox`.
    """

    kind = "command"

    def __init__(
        self,
        argv: Sequence[str],
        timeout_seconds: float,
        git_author_name: str = "convergebot",
        git_author_email: str = "convergebot@users.noreply.github.com",
        workdir_root: Path | None = None,
        git_timeout_seconds: float = DEFAULT_GIT_TIMEOUT_SECONDS,
        sandbox: Sandbox | None = None,
    ) -> None:
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("command fixer: argv must be a non-empty list of strings")
        if not timeout_seconds > 0 or not git_timeout_seconds > 0:
            raise ValueError("command fixer: timeouts must be positive")
        self.argv = list(argv)
        if os.sep in self.argv[0] and not os.path.isabs(self.argv[0]):
            # The command runs in the clone; a relative program path means where the bot runs.
            self.argv[0] = os.path.abspath(self.argv[0])
        self.timeout_seconds = float(timeout_seconds)
        self.identity = GitIdentity(git_author_name, git_author_email)
        self.workdir_root = Path(workdir_root) if workdir_root is not None else None
        self.git_timeout_seconds = float(git_timeout_seconds)
        self.sandbox = sandbox

    async def run(self, req: FixRequest) -> Verdict:
        bound = log.bind(
            pr_key=req.pr_key, round=req.round_no, attempt=req.attempt, fixer=self.kind
        )
        bound.info("fixer.started", program=self.argv[0], findings=len(req.findings),
                   sandboxed=self.sandbox is not None)
        started = time.monotonic()
        try:
            async with Workspace.open(
                req,
                identity=self.identity,
                git_timeout=self.git_timeout_seconds,
                workdir_root=self.workdir_root,
                sandbox=self.sandbox,
            ) as ws:
                verdict = await self._run_in(ws, req, bound)
        except GitError as e:
            verdict = husk(str(e))
        bound.info(
            "fixer.finished",
            status=verdict.status,
            finished=verdict.finished,
            pushed_head=verdict.pushed_head,
            push_rejected=verdict.push_rejected,
            withheld=verdict.withheld,
            thread_actions=len(verdict.thread_actions),
            detail=verdict.detail,
            seconds=round(time.monotonic() - started, 3),
        )
        return verdict

    async def _run_in(self, ws: Workspace, req: FixRequest, bound) -> Verdict:
        ws.write_inputs(render_prompt(req), render_findings(req))
        places = {
            "{prompt_file}": str(ws.prompt_file),
            "{findings_file}": str(ws.findings_file),
            "{repo_dir}": str(ws.repo),
        }
        argv = [_substitute(item, places) for item in self.argv]
        secrets = secret_forms(req.token)
        env = fixer_env(
            self.identity,
            {
                "CONVERGEBOT_PROMPT_FILE": str(ws.prompt_file),
                "CONVERGEBOT_FINDINGS_FILE": str(ws.findings_file),
                "CONVERGEBOT_REPO_DIR": str(ws.repo),
                "CONVERGEBOT_PR_KEY": req.pr_key,
                "CONVERGEBOT_ROUND": str(req.round_no),
                "CONVERGEBOT_ATTEMPT": str(req.attempt),
            },
            secrets,
        )
        if self.sandbox is not None:
            argv = self.sandbox.wrap(argv, repo=ws.repo, inputs=(ws.prompt_file, ws.findings_file),
                                     workdir=ws.root.parent)
        try:
            result = await run_process(argv, cwd=ws.repo, env=env, timeout=self.timeout_seconds)
        except OSError as e:
            return husk(f"command could not start: {e.strerror or type(e).__name__}")
        if result.timed_out:
            return husk(f"timed out after {self.timeout_seconds:g}s")
        _line, raw = parse_verdict(result.stdout)
        if raw is None and result.returncode != 0:
            bound.warning(
                "fixer.crashed",
                detail=result.describe(),
                stderr_tail=scrub(result.stderr[-1000:], secrets),
            )
            return husk(result.describe())
        verdict = normalize(raw, finished=True)
        if result.returncode != 0:
            verdict = replace(verdict, detail=result.describe())
        publication = await ws.publish(commit_message(req))
        return publication.apply(verdict)


def _substitute(item: str, places: dict[str, str]) -> str:
    # Plain replacement, not str.format: argv items may hold other braces (JSON, shell).
    for placeholder, value in places.items():
        item = item.replace(placeholder, value)
    return item
