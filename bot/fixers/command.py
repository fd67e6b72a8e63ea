"""The `command` fixer: a configured CLI (a coding agent) run in a fresh clone of the PR branch.

Only the agent's command runs untrusted. The bot clones with the token before it; after it,
the bot's commit of what the agent left runs in the same sandbox, and the push with the token
runs outside it, in a repository the agent never touched (bot/fixers/workspace.py).
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from bot.fixers import reports
from bot.fixers.agent_wrapper import infer_verdict, inferred
from bot.fixers.base import ADDRESSED, CONVERGED, FixRequest, Verdict, husk
from bot.fixers.environment import GitIdentity, fixer_env, scrub, secret_forms
from bot.fixers.git import GitError
from bot.fixers.gitdir import SAFE_CONFIG
from bot.fixers.presets import FINDING_FILES, Preset
from bot.fixers.process import ProcessResult, run_process
from bot.fixers.prompt import render_findings, render_prompt
from bot.fixers.reports import Report
from bot.fixers.sandbox import Sandbox, ensure_writable
from bot.fixers.usage import Usage
from bot.fixers.verdict import TEXT_CAP, normalize, parse_verdict
from bot.fixers.workspace import Workspace, commit_message
from bot.logs import get_logger

log = get_logger(__name__)

DEFAULT_GIT_TIMEOUT_SECONDS = 300.0
AGENT_OUTPUT_CAP = 1 << 20  # bytes of a file the agent wrote (its last message) the bot reads


class CommandFixer:
    """Runs `argv` with cwd = the clone; `{prompt_file}`, `{findings_file}` and `{repo_dir}` in
    argv items are replaced by paths. The command's verdict is its last JSON line on stdout.

    With a `sandbox` the command runs inside it (bot/fixers/sandbox.py); without one it can
    read whatever the bot's user can. `serve` picks it from `fixer.sandbox`.

    With a `preset` (bot/fixers/presets.py) argv is a known agent CLI's: `{prompt}` and
    `{out_dir}` are filled in too, and when it prints no verdict line one is inferred from its
    final message and its commit (bot/fixers/agent_wrapper.py).
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
        preset: Preset | None = None,
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
        self.preset = preset

    async def run(self, req: FixRequest) -> Verdict:
        bound = log.bind(
            pr_key=req.pr_key, round=req.round_no, attempt=req.attempt, fixer=self.kind
        )
        bound.info("fixer.started", program=self.argv[0], findings=len(req.findings),
                   sandboxed=self.sandbox is not None,
                   preset=self.preset.name if self.preset else None)
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
        argv, env, secrets, out_dir = self._command(ws, req)
        started = time.monotonic()
        try:
            result = await run_process(argv, cwd=ws.repo, env=env, timeout=self.timeout_seconds)
        except OSError as e:
            return husk(f"command could not start: {e.strerror or type(e).__name__}")
        seconds = time.monotonic() - started
        if result.timed_out:
            return replace(husk(f"timed out after {self.timeout_seconds:g}s"), usage=Usage(seconds=seconds))
        return await self._verdict(ws, req, result, seconds, out_dir, secrets, bound)

    def _command(self, ws: Workspace, req: FixRequest) -> tuple[list[str], dict[str, str], tuple[str, ...], Path]:
        """The agent's command line and environment for this request, its inputs written to the
        workspace; the secrets its output is scrubbed of; where a preset's CLI writes."""
        ws.write_inputs(render_prompt(req), render_findings(req))
        places = {
            "{prompt_file}": str(ws.prompt_file),
            "{findings_file}": str(ws.findings_file),
            "{repo_dir}": str(ws.repo),
        }
        out_dir = ws.root / "agent"
        if self.preset is not None:
            out_dir.mkdir()
            _exclude(ws.repo, self.preset.ignore)
            places["{out_dir}"] = str(out_dir)
            places["{prompt}"] = ws.prompt_file.read_text(encoding="utf-8")  # last: never re-read
        argv = [arg for item in self.argv for arg in (
            _finding_files(ws.repo, req) if item == FINDING_FILES else [_substitute(item, places)])]
        secrets = secret_forms(req.token)
        if self.preset is not None:
            # Its state directories again, in case they were removed since the bot started.
            ensure_writable(self.preset.state_paths())
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
        for name, value in self.preset.env if self.preset is not None else ():
            env.setdefault(name, value)
        if self.sandbox is not None:
            # By its path, so the sandbox can let the agent see the program's whole install.
            argv[0] = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
            argv = self.sandbox.wrap(argv, repo=ws.repo, inputs=(ws.prompt_file, ws.findings_file),
                                     workdir=ws.root.parent,
                                     outputs=(out_dir,) if self.preset is not None else ())
        return argv, env, secrets, out_dir

    async def _verdict(self, ws: Workspace, req: FixRequest, result: ProcessResult, seconds: float,
                       out_dir: Path, secrets: tuple[str, ...], bound) -> Verdict:
        """What the agent's run comes to: its verdict line where it wrote one, else (a preset's
        CLI) what its report and its changes say; the changes published either way."""
        _line, raw = parse_verdict(result.stdout)
        report = Report("", usage=Usage())
        if self.preset is not None:
            written = _read_output(out_dir / self.preset.message_file) if self.preset.message_file else None
            report = reports.read(self.preset.output, result.stdout, result.stderr, written)
            if raw is None:  # a verdict line inside its final message (Claude's JSON, a file)
                _line, raw = parse_verdict(report.message)
        usage = replace(report.usage, seconds=seconds)
        if raw is None and result.returncode != 0:
            bound.warning(
                "fixer.crashed",
                detail=result.describe(),
                stderr_tail=scrub(result.stderr[-1000:], secrets),
            )
            return replace(husk(result.describe()), usage=usage)
        if self.preset is None or raw is not None:
            verdict = replace(normalize(raw, finished=True), usage=usage)
            if result.returncode != 0:
                verdict = replace(verdict, detail=result.describe())
            publication = await ws.publish(commit_message(req))
            if self.preset is not None and not _changed(publication):
                verdict = _did_nothing(verdict, report, bound) or verdict
            return publication.apply(verdict)
        publication = await ws.publish(commit_message(req))
        changed = _changed(publication)
        files = None
        if publication.pushed_head:
            # Read in publish.git, the bot's own copy the agent never touched.
            names = await ws.local.run(*SAFE_CONFIG, "diff", "--name-only", "-z", req.entry_head,
                                       publication.pushed_head, cwd=ws.publish_repo)
            files = [name for name in names.split("\0") if name]
        verdict = inferred(normalize(infer_verdict(report.message, changed=changed, findings=req.findings,
                                                   changed_files=files), finished=True))
        verdict = replace(verdict, usage=usage)
        if not changed:
            verdict = _did_nothing(verdict, report, bound) or verdict
        bound.info("fixer.verdict_inferred", preset=self.preset.name, status=verdict.status,
                   changed=changed, threads_fixed=len(verdict.thread_actions))
        return publication.apply(verdict)


def _finding_files(repo: Path, req: FixRequest) -> list[str]:
    """The files the findings name that are files of the clone, once each: paths come from
    review text, so one that would read as a flag, or leave the clone, is left out."""
    root = repo.resolve()
    out = []
    for finding in req.findings:
        path = finding.path or ""
        if not path or path.startswith("-") or path in out:
            continue
        target = (repo / path).resolve()
        if target.is_relative_to(root) and target.is_file():
            out.append(path)
    return out


def _changed(publication) -> bool:
    return bool(publication.pushed_head or publication.rejected or publication.withheld)


def _did_nothing(verdict: Verdict, report: Report, bound) -> Verdict | None:
    """A run that changed nothing and whose CLI reported failed edits or tool calls, or that
    said nothing at all: not "addressed" or "converged" on the agent's word, but no progress,
    its summary what went wrong. None when the verdict stands (a question, a reasoned "nothing
    needed" with no failure)."""
    if verdict.status not in (ADDRESSED, CONVERGED):
        return None
    if report.failures:
        what = "its CLI reported " + "; ".join(report.failures)
    elif not report.message.strip():
        what = "it exited without a change or a word"
    else:
        return None
    bound.warning("fixer.agent_failed", failures=list(report.failures), claimed=verdict.status)
    summary = f"the agent changed nothing: {what}"
    if report.message.strip():
        summary += f"\n\nIts final message: {report.message.strip()}"
    return replace(verdict, status=ADDRESSED, summary=summary[:TEXT_CAP], failure=what[:TEXT_CAP],
                   thread_actions=())


def _exclude(repo: Path, patterns: tuple[str, ...]) -> None:
    """A preset CLI's own files (caches, histories) are not work: keep them out of the commit.
    Written in the bot's fresh clone before the agent runs; reclaiming `.git` keeps it."""
    if patterns:
        (repo / ".git" / "info").mkdir(exist_ok=True)
        with open(repo / ".git" / "info" / "exclude", "a", encoding="utf-8") as f:
            f.write("".join(f"\n{pattern}" for pattern in patterns) + "\n")


def _read_output(path: Path) -> str | None:
    """A file the agent wrote, read without following a link it may have put there; None when
    there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        return f.read(AGENT_OUTPUT_CAP).decode("utf-8", errors="replace")


def _substitute(item: str, places: dict[str, str]) -> str:
    # Plain replacement, not str.format: argv items may hold other braces (JSON, shell).
    for placeholder, value in places.items():
        item = item.replace(placeholder, value)
    return item
