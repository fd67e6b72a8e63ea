"""`convergebot demo`: the real bot against the built-in GitHub simulator, scripted end to end.

The same `running()` stack as `serve` (HTTP server, webhooks, poller, job workers, engine) on a
temporary SQLite file; the simulator plays GitHub, a scripted Copilot reviews, a scripted fixer
pushes real commits, and a scripted maintainer answers the one escalation by commenting.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bot.config import Config
from bot.engine.read import NONE, dependencies_of
from bot.fixers import ScriptedFixer
from bot.logs import configure_logging
from bot.runtime.context import Runtime
from bot.surfaces.serve import running
from simulator import ReviewerScript, ReviewStep, Simulator, SimulatorServer, ThreadSpec
from storage import escalations, prs, rounds
from storage.keys import PrKey, parse_pr_key

REPO = "octo-org/widgets"
COPILOT = "copilot-pull-request-reviewer[bot]"
MAINTAINER = "alice"
SECRET = "demo-webhook-secret"
QUESTION = "Should `mean([])` return 0 or raise ValueError?"
FILES = {
    "README.md": "# widgets\n\nSmall helpers.\n",
    "widgets/stats.py": "def mean(values):\n    return sum(values) / len(values)\n",
    "widgets/text.py": "def shout(s):\n    return s.upper()\n",
}


@dataclass(frozen=True)
class DemoPr:
    head: str
    title: str
    story: str
    fixer: tuple[str, ...]
    threads: tuple[int, ...]  # threads the reviewer leaves, review by review
    path: str
    depends_on_first: bool = False
    # Main changes the same lines after the PR branched: GitHub reads it `dirty` once it
    # converged, and the fixer brings main in (a conflict round) before it merges.
    main_conflicts: dict[str, str | None] | None = None  # the files, as `push` takes them


PULLS = (
    DemoPr("feat/median", "Add median()", "converges in 3 rounds", ("push",), (3, 1, 0), "widgets/median.py"),
    DemoPr("fix/empty-mean", "Handle empty input in mean()", "escalates; a maintainer answers",
           (f"ask:{QUESTION}", "push"), (1, 0), "widgets/stats.py"),
    DemoPr("feat/shout", "Add shout!() variants", "fixer husk, rerun, converges",
           ("husk", "push"), (1, 0), "widgets/text.py"),
    DemoPr("docs/median", "Document median()", "waits for PR 1 (Depends-on), then merges",
           ("push",), (0,), "docs/median.md", depends_on_first=True),
    DemoPr("docs/readme", "Describe the helpers in the README", "conflicts with main; the fixer merges main in",
           ("push",), (0, 0), "README.md",
           main_conflicts={"README.md": "# widgets\n\nSmall, tested helpers.\n"}),
)


def _reviewer(threads: tuple[int, ...], path: str) -> ReviewerScript:
    # Each review asks something new: a finding repeated from a round that settled it would be
    # answered from the record (carried over), not fixed again.
    return ReviewerScript(login=COPILOT, delay=0.2, steps=[
        ReviewStep(threads=[ThreadSpec(path=path, line=1,
                                       body=f"Review {k + 1}, finding {i + 1}: tighten this up.")
                            for i in range(n)],
                   body=f"Copilot reviewed the change and left {n} comment(s).", state="COMMENTED")
        for k, n in enumerate(threads)])


def _config(db: Path, api_url: str) -> Config:
    return Config.model_validate({
        "database": {"url": f"sqlite:///{db}"},
        "logging": {"level": "warning"},
        "github": {"api_url": api_url, "token": "demo-token", "webhook_secret": SECRET},
        "server": {"port": 0, "shutdown_grace_seconds": 2},
        "poller": {"interval_seconds": 2, "jitter_seconds": 0},
        "jobs": {"workers": 4, "idle_poll_seconds": 0.1},
        "convergence": {"reviewers": [COPILOT], "maintainers": [MAINTAINER],
                        "review_wait_timeout_seconds": 60, "nudge_window_seconds": 20},
        "fixer": {"kind": "fake", "timeout_seconds": 30},
    })


async def _summary(rt: Runtime, keys: list[PrKey]) -> list[dict]:
    out = []
    deps = await dependencies_of(rt.db, keys)
    for key in keys:
        view = await prs.get(rt.db, key)
        out.append({
            "pr_key": key,
            "status": view.derived_status if view else "not enrolled",
            "rounds": len([r for r in await rounds.for_pr(rt.db, key)
                           if view and r.process_key == view.pr.process_key]),
            "escalations": len(await escalations.for_pr(rt.db, key)),
            "merged_at": view.pr.merged_at.isoformat() if view and view.pr.merged_at else None,
            "depends_on": list(deps.get(key, NONE).depends_on),
        })
    return out


async def run_demo(as_json: bool = False, timeout: float = 110.0) -> int:
    configure_logging("warning", "json")
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if as_json else (lambda *a: print(*a, flush=True))
    with tempfile.TemporaryDirectory(prefix="convergebot-demo-") as tmp:
        root = Path(tmp)
        sim = Simulator(root=root / "github")
        async with SimulatorServer(sim) as gh:
            await sim.create_repo(REPO, files=FILES, collaborators={MAINTAINER: "admin", "bob": "write"})
            numbers: list[int] = []
            for p in PULLS:
                body = f"Demo: {p.story}."
                if p.depends_on_first:
                    body += f"\n\nDepends-on: {REPO}#{numbers[0]}"
                pr = await sim.open_pr(REPO, title=p.title, head=p.head, author="bob", body=body,
                                       files={p.path: FILES.get(p.path, "") + f"# {p.title}\n"})
                sim.set_reviewer(REPO, _reviewer(p.threads, p.path), number=pr.number)
                numbers.append(pr.number)
                if p.main_conflicts:
                    await sim.push(REPO, "main", p.main_conflicts, author=MAINTAINER,
                                   message="Reword the README")
            keys = [parse_pr_key(f"{REPO}#{n}") for n in numbers]
            fixer = ScriptedFixer({k: list(p.fixer) for k, p in zip(keys, PULLS, strict=True)},
                                  workdir_root=root)
            say(f"simulator at {gh.url} · database {root / 'convergebot.db'}")
            async with running(_config(root / "convergebot.db", gh.url), fixer=fixer) as (rt, server):
                sim.configure_webhooks(f"http://127.0.0.1:{server.port}/webhook", SECRET)
                for n, p in zip(numbers, PULLS, strict=True):
                    say(f"  #{n} {p.title!r}: {p.story}")
                    await sim.comment(REPO, n, "/converge", user=MAINTAINER)
                code = await _watch(rt, sim, keys, say, timeout)
                table = await _summary(rt, keys)
                # The bot stops next: the simulator's last webhooks (the merges' checks) would
                # only fail against a closed port and print warnings after the result.
                sim.configure_webhooks(None)
        if as_json:
            print(json.dumps(table, indent=2))
        else:
            _print_table(table)
    return code


async def _watch(rt: Runtime, sim: Simulator, keys: list[PrKey], say, timeout: float) -> int:
    started = time.monotonic()
    seen: dict[PrKey, tuple] = {}
    answered = False
    while time.monotonic() - started < timeout:
        done = True
        for key in keys:
            view = await prs.get(rt.db, key)
            state = (view.derived_status, view.pr.current_round) if view else ("enrolling", 0)
            if seen.get(key) != state:
                seen[key] = state
                action = f" · {view.pr.last_action}" if view and view.pr.last_action else ""
                say(f"{time.monotonic() - started:6.1f}s  {key:<22} {state[0]:<15} round {state[1]}{action}")
            if state[0] == "escalated" and not answered:
                # The scripted maintainer reads the escalation and answers on the PR.
                answered = True
                await sim.comment(REPO, int(key.rsplit("#", 1)[1]),
                                  "/converge answer Return 0.0 for an empty list.", user=MAINTAINER)
            done = done and state[0] in ("merged",)
        if done:
            say(f"all {len(keys)} PRs merged in {time.monotonic() - started:.1f}s")
            return 0
        await asyncio.sleep(0.1)
    say(f"demo timed out after {timeout:.0f}s")
    return 1


def _print_table(rows: list[dict]) -> None:
    header = ("PR", "STATUS", "ROUNDS", "ESCALATIONS", "MERGED AT", "DEPENDS ON")
    cells = [header] + [(r["pr_key"], r["status"], str(r["rounds"]), str(r["escalations"]),
                         (r["merged_at"] or "-")[:19], ", ".join(r["depends_on"]) or "-") for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    print()
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
