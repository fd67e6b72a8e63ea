"""The fake fixer (kind "fake"): scripted behaviours for tests, the simulator and the demo.

It does real git work ("push" clones, edits, commits and pushes under the same lease as the
command fixer, through the same Workspace), so the engine under test sees real head moves. On a
conflict round "push" merges the base branch in, conflicts resolved in favour of the branch,
so the head it pushes merges cleanly; on a review or ci round it appends to the findings' files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from bot.fixers.base import FixRequest, Verdict, husk
from bot.fixers.environment import GitIdentity
from bot.fixers.git import GitError
from bot.fixers.verdict import normalize
from bot.fixers.workspace import Workspace, base_to_fetch, commit_message
from bot.rules.model import Finding
from storage.keys import PrKey

BEHAVIOURS = (
    "push", "husk", "noop", "ask:<question>", "blocked:<question>", "decline", "converged"
)
FALLBACK_FILE = "CHANGES.md"
ANY_PR = "*"


class ScriptedFixer:
    """`script` is one list of behaviours for every PR, or a list per pr_key (`"*"`: any other
    PR). Each PR consumes its list one behaviour per run and repeats the last one when done;
    a PR the script does not name gets "push"."""

    kind = "fake"

    def __init__(
        self,
        script: Mapping[str, Sequence[str]] | Sequence[str],
        *,
        git_author_name: str = "convergebot",
        git_author_email: str = "convergebot@users.noreply.github.com",
        workdir_root: Path | None = None,
        git_timeout_seconds: float = 60.0,
    ) -> None:
        if isinstance(script, str):
            script = [script]
        plans = dict(script) if isinstance(script, Mapping) else {ANY_PR: script}
        self.plans: dict[str, tuple[str, ...]] = {}
        for key, steps in plans.items():
            steps = (steps,) if isinstance(steps, str) else tuple(steps)
            if not steps:
                raise ValueError(f"fake fixer: the script for {key!r} is empty")
            for step in steps:
                _check(step)
            self.plans[key] = steps
        self.identity = GitIdentity(git_author_name, git_author_email)
        self.workdir_root = workdir_root
        self.git_timeout_seconds = git_timeout_seconds
        self.cursors: dict[str, int] = {}
        self.history: list[tuple[str, int, str]] = []  # (pr_key, round, behaviour) per run

    def next_behaviour(self, pr_key: PrKey) -> str:
        steps = self.plans.get(pr_key) or self.plans.get(ANY_PR) or ("push",)
        n = self.cursors.get(pr_key, 0)
        self.cursors[pr_key] = n + 1
        return steps[min(n, len(steps) - 1)]

    async def run(self, req: FixRequest) -> Verdict:
        behaviour = self.next_behaviour(req.pr_key)  # taken before any await: runs may overlap
        self.history.append((req.pr_key, req.round_no, behaviour))
        if behaviour == "push":
            return await self._push(req)
        if behaviour == "husk":
            return husk("scripted husk")
        threads = _thread_ids(req)
        raw: dict = {"status": "addressed", "summary": f"fake fixer: {behaviour}"}
        if behaviour.startswith(("ask:", "blocked:")):
            status, _, question = behaviour.partition(":")
            raw.update(status="needs_input" if status == "ask" else "blocked", question=question)
        elif behaviour == "decline":
            raw["threads"] = [
                {"id": t, "action": "declined", "reason": "not applicable"} for t in threads
            ]
        elif behaviour == "converged":
            raw["status"] = "converged"
        return normalize(raw, finished=True)

    async def _push(self, req: FixRequest) -> Verdict:
        try:
            async with Workspace.open(
                req,
                identity=self.identity,
                git_timeout=self.git_timeout_seconds,
                workdir_root=self.workdir_root,
            ) as ws:
                base = base_to_fetch(req)
                if base is not None:
                    summary = await _merge_base(ws, req.head_branch, base)
                else:
                    summary = f"changed {', '.join(sorted(_edit(ws.repo, req)))}"
                publication = await ws.publish(commit_message(req))
        except GitError as e:
            return husk(str(e))
        verdict = normalize(
            {
                "status": "addressed",
                "summary": f"fake fixer: {summary}",
                "threads": [{"id": t, "action": "fixed", "reason": "fake fix"} for t in _thread_ids(req)],
            },
            finished=True,
        )
        return publication.apply(verdict)


def _thread_ids(req: FixRequest) -> list[str]:
    """Every thread it was shown, a group's twins each by its own id, as an agent following the
    prompt answers them."""
    return [tid for f in req.findings if f.thread_id for tid in (f.thread_id, *(t[0] for t in f.twins))]


async def _merge_base(ws: Workspace, branch: str, base: str) -> str:
    """Merge `origin/<base>` into the clone's branch, every conflict settled in the branch's
    favour (an agent would weigh both sides; the result merges cleanly either way)."""
    git, repo = ws.local, ws.repo
    merged = await git.call("merge", "--no-ff", "--no-edit", "-X", "ours",
                            "-m", f"Merge origin/{base} into {branch}", f"origin/{base}", cwd=repo)
    if merged.ok:
        return f"merged origin/{base}"
    # `-X ours` settles conflicting hunks, not a file one side deleted and the other changed.
    unmerged = await git.run("diff", "--name-only", "-z", "--diff-filter=U", cwd=repo)
    paths = [p for p in unmerged.split("\0") if p]
    if not paths:
        raise GitError(git.failure("merge", merged))
    for path in paths:
        if (await git.call("checkout", "--ours", "--", path, cwd=repo)).ok:
            await git.run("add", "--", path, cwd=repo)
        else:  # the branch deleted it
            await git.run("rm", "--quiet", "--", path, cwd=repo)
    await git.run("commit", "--quiet", "--no-edit", cwd=repo)
    return f"merged origin/{base}, keeping the branch's {', '.join(sorted(paths))}"


def _edit(repo: Path, req: FixRequest) -> set[str]:
    """Append one line per finding to its file (or CHANGES.md); returns the files changed."""
    changed: set[str] = set()
    for finding in req.findings or (None,):
        rel = _safe_path(finding)
        target = repo / rel
        inside = target.resolve().is_relative_to(repo.resolve())  # a symlink may point away
        if not inside or (target.exists() and not target.is_file()):
            rel, target = FALLBACK_FILE, repo / FALLBACK_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        mark = finding.fingerprint if finding else "no findings"
        with target.open("a", encoding="utf-8") as f:
            f.write(f"convergebot fake fix: {mark} (round {req.round_no})\n")
        changed.add(rel)
    return changed


def _safe_path(finding: Finding | None) -> str:
    """The finding's path when it stays inside the repository (and out of .git)."""
    if finding is None or not finding.path:
        return FALLBACK_FILE
    path = PurePosixPath(finding.path)
    if path.is_absolute() or ".." in path.parts or ".git" in path.parts or not path.parts:
        return FALLBACK_FILE
    return str(path)


def _check(step: object) -> None:
    if not isinstance(step, str):
        raise ValueError(f"fake fixer: behaviour {step!r} is not a string")
    name, sep, question = step.partition(":")
    if sep and name in ("ask", "blocked"):
        if not question.strip():
            raise ValueError(f"fake fixer: {step!r} needs a question after the colon")
        return
    if step not in ("push", "husk", "noop", "decline", "converged"):
        raise ValueError(f"fake fixer: unknown behaviour {step!r}; known: {', '.join(BEHAVIOURS)}")
