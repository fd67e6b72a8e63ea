"""Check runs (grouped in one suite per app and sha) and commit statuses."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..core import SimulatorCore
from ..errors import Unprocessable
from ..ids import iso, now
from ..shapes.checks import check_run as render_run
from ..shapes.checks import check_suite as render_suite
from ..shapes.checks import suite_state
from ..shapes.commits import commit as render_commit
from ..state import CheckRun, CheckSuite, CommitStatus, Repo

RUN_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped",
               "stale", "timed_out")
STATUS_STATES = ("error", "failure", "pending", "success")
ANNOTATION_FIELDS = ("path", "start_line", "end_line", "annotation_level", "message")
_RUN_FIELDS = ("name", "status", "conclusion", "output", "details_url", "external_id",
               "started_at", "completed_at")


def _parse_time(value: Any, field: str) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise Unprocessable(f"{field} is not an ISO-8601 timestamp", field) from None


class CheckOps(SimulatorCore):
    async def resolve_sha(self, repo: Repo, ref: str) -> str:
        sha = await self.git.resolve(repo.git_dir, ref)
        if sha is None:
            raise Unprocessable(f"No commit found for SHA: {ref}", "head_sha")
        return sha

    async def create_check_run(self, repo_name: str, *, head_sha: str, name: str,
                               app: str = "github-actions", **fields: Any) -> CheckRun:
        """POST /check-runs semantics; sends check_run `created` (and `completed` if it is)."""
        repo = self.repo(repo_name)
        if not name:
            raise Unprocessable("name is required", "name")
        async with self.lock:
            sha = await self.resolve_sha(repo, head_sha)
            suite = self._suite_for(repo, sha, app)
            run = CheckRun(id=self.state.new_id(), repo=repo.full_name, head_sha=sha, name=name,
                           suite_id=suite.id, app=app, started_at=now())
            self._apply(run, fields)
            self.state.add_check_run(run)
            suite.run_ids.append(run.id)
            await self._emit_run(repo, run, "created")
            if run.status == "completed":
                await self._completed(repo, run, suite)
        return run

    async def update_check_run(self, repo_name: str, run_id: int, **fields: Any) -> CheckRun:
        repo = self.repo(repo_name)
        run = self.state.check_run(repo, run_id)
        async with self.lock:
            was_completed = run.status == "completed"
            self._apply(run, fields)
            if run.status == "completed" and not was_completed:
                await self._completed(repo, run, self.state.check_suites[run.suite_id])
        return run

    async def set_check_run(self, repo_name: str, ref: str, name: str, *,
                            status: str = "completed", conclusion: str | None = "success",
                            app: str = "github-actions", **fields: Any) -> CheckRun:
        """Create, or update the latest run of the same name and app on that commit."""
        repo = self.repo(repo_name)
        sha = await self.resolve_sha(repo, ref)
        fields.update(status=status, conclusion=conclusion if status == "completed" else None)
        for run in reversed(self.runs_for(repo, sha)):
            if run.name == name and run.app == app:
                return await self.update_check_run(repo_name, run.id, **fields)
        return await self.create_check_run(repo_name, head_sha=sha, name=name, app=app, **fields)

    def runs_for(self, repo: Repo, sha: str) -> list[CheckRun]:
        return self.state.check_runs_at(repo, sha)

    def latest_runs(self, repo: Repo, sha: str) -> list[CheckRun]:
        """The newest run per name and app, newest first (the check-runs list's default filter,
        and what a commit's status rollup shows)."""
        latest: dict[tuple[str, str], CheckRun] = {}
        for run in sorted(self.runs_for(repo, sha), key=lambda r: r.id, reverse=True):
            latest.setdefault((run.name, run.app), run)
        return list(latest.values())

    def _suite_for(self, repo: Repo, sha: str, app: str) -> CheckSuite:
        found = self.state.check_suite_at(repo, sha, app)
        if found is not None:
            return found
        stamp = now()
        suite = CheckSuite(id=self.state.new_id(), repo=repo.full_name, head_sha=sha,
                           head_branch=None, app=app, created_at=stamp, updated_at=stamp)
        self.state.add_check_suite(suite)
        return suite

    @staticmethod
    def _apply(run: CheckRun, fields: dict[str, Any]) -> None:
        unknown = set(fields) - set(_RUN_FIELDS)
        if unknown:
            raise Unprocessable(f"unknown check run field {sorted(unknown)[0]}", sorted(unknown)[0])
        status = fields.get("status")
        conclusion = fields.get("conclusion")
        if status is not None and status not in RUN_STATUSES:
            raise Unprocessable(f"status must be one of {', '.join(RUN_STATUSES)}", "status")
        if conclusion is not None and conclusion not in CONCLUSIONS:
            raise Unprocessable(f"conclusion must be one of {', '.join(CONCLUSIONS)}",
                                "conclusion")
        if conclusion is not None:
            status = "completed"  # GitHub: giving a conclusion completes the run
        if status == "completed" and conclusion is None and run.conclusion is None:
            raise Unprocessable("conclusion is required when status is completed", "conclusion")
        for key in ("name", "details_url", "external_id"):
            if fields.get(key) is not None:
                setattr(run, key, fields[key])
        if fields.get("output"):
            run.output = {**run.output, **{k: v for k, v in fields["output"].items()
                                           if k in ("title", "summary", "text")}}
            # GitHub adds a write's annotations to the run's (at most 50 a request).
            annotations = fields["output"].get("annotations") or []
            if not isinstance(annotations, list) or len(annotations) > 50:
                raise Unprocessable("output.annotations: at most 50 a request", "output")
            for a in annotations:
                if not isinstance(a, dict) or not all(a.get(k) for k in ANNOTATION_FIELDS):
                    raise Unprocessable(f"an annotation needs {', '.join(ANNOTATION_FIELDS)}", "output")
            run.annotations.extend(annotations)
        if fields.get("started_at") is not None:
            run.started_at = _parse_time(fields["started_at"], "started_at")
        if status is not None:
            run.status = status
            if status != "completed":  # back in progress: the old verdict no longer holds
                run.conclusion, run.completed_at = None, None
        if conclusion is not None:
            run.conclusion = conclusion
        if run.status == "completed":
            run.completed_at = (_parse_time(fields.get("completed_at"), "completed_at")
                                or run.completed_at or now())

    async def _emit_run(self, repo: Repo, run: CheckRun, action: str) -> None:
        branches = await self.git.heads(repo.git_dir)
        prs = self.open_prs_at(repo, run.head_sha, branches)
        self.emit("check_run", repo, f"{run.app}[bot]", action,
                  check_run=render_run(self.ctx, repo, run, prs))

    async def _completed(self, repo: Repo, run: CheckRun, suite: CheckSuite) -> None:
        await self._emit_run(repo, run, "completed")
        runs = [self.state.check_runs[r] for r in suite.run_ids]
        suite.updated_at = now()
        if suite_state(runs)[0] == "completed":
            branches = await self.git.heads(repo.git_dir)
            prs = self.open_prs_at(repo, suite.head_sha, branches)
            head = await self.git.commit_info(repo.git_dir, suite.head_sha)
            self.emit("check_suite", repo, f"{suite.app}[bot]", "completed",
                      check_suite=render_suite(self.ctx, repo, suite, runs, prs, head))
        await self.queue_checks_changed(repo, run.head_sha)

    async def set_status(self, repo_name: str, ref: str, state: str, *,
                         context: str = "default", description: str | None = None,
                         target_url: str | None = None,
                         user: str = "github-actions[bot]") -> CommitStatus:
        """POST /statuses/{sha} semantics; sends a `status` event."""
        if state not in STATUS_STATES:
            raise Unprocessable(f"state must be one of {', '.join(STATUS_STATES)}", "state")
        repo = self.repo(repo_name)
        async with self.lock:
            sha = await self.resolve_sha(repo, ref)
            stamp = now()
            s = CommitStatus(id=self.state.new_id(), repo=repo.full_name, sha=sha, state=state,
                             context=context, creator=user, created_at=stamp, updated_at=stamp,
                             description=description, target_url=target_url)
            self.state.statuses.append(s)
            branches = [{"name": b, "commit": {"sha": h, "url": self.ctx.api(
                f"repos/{repo.full_name}/commits/{h}")}, "protected": False}
                for b, h in (await self.git.heads(repo.git_dir)).items() if h == sha]
            self.emit("status", repo, user, id=s.id, sha=sha, name=repo.full_name,
                      target_url=target_url, context=context, description=description,
                      state=state, branches=branches,
                      commit=render_commit(self.ctx, repo,
                                           await self.git.commit_info(repo.git_dir, sha)),
                      created_at=iso(stamp), updated_at=iso(stamp))
            await self.queue_checks_changed(repo, sha)
        return s

    def latest_statuses(self, repo: Repo, sha: str) -> list[CommitStatus]:
        """The newest status per context, newest first (what the combined status lists)."""
        latest: dict[str, CommitStatus] = {}
        for s in self.state.statuses:
            if s.repo == repo.full_name and s.sha == sha:
                latest[s.context] = s
        return sorted(latest.values(), key=lambda s: s.id, reverse=True)
