"""The `convergebot` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy.exc import DBAPIError

from bot import __version__
from bot.config import Config, ConfigError, load_config, retention_settings
from bot.engine.read import asked_reviewers
from bot.engine.submit import Outcome, SubmitOptions, abandon_pr, submit_pr
from bot.logs import configure_logging
from bot.rules.merge import DependencyError, explicit_dependencies
from bot.rules.model import MAX_ROUNDS
from bot.surfaces.views import ListQuery, dependencies_text, list_page, pr_detail, prs_json
from storage import prs, retention
from storage.backup import mark_restored
from storage.database import Database
from storage.keys import PrKey, PrKeyError, parse_pr_key
from storage.migrate import SchemaTooNew, current_revision, head_revision, known, migrate
from storage.models import utcnow
from storage.urls import DatabaseUnreachable, NoDatabase, UnsupportedURL, normalize_url

EXIT_USAGE = 2
EXIT_FAILED = 1
# Commands that only read: they never create a database (nor migrate one).
READ_ONLY = ("status", "doctor")


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


class NoSuchPr(Exception):
    """GitHub answered 404 for the PR given to `submit`: one line, exit 1."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="convergebot", description=__doc__)
    p.add_argument("--version", action="version", version=f"convergebot {__version__}")
    p.add_argument("--config", help="TOML config file (default: $CONVERGEBOT_CONFIG or ./convergebot.toml)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # --config after the command as well as before it; SUPPRESS keeps one given before it.
    config_too = argparse.ArgumentParser(add_help=False)
    config_too.add_argument("--config", default=argparse.SUPPRESS, help="TOML config file (as before the command)")

    mg = sub.add_parser("migrate", parents=[config_too], help="apply database migrations")
    mg.add_argument("--to", metavar="REV", default="head",
                    help="the schema revision to go to, older for a rollback (default: the newest)")

    s = sub.add_parser("submit", parents=[config_too], help="enroll or resubmit a PR")
    s.add_argument("pr", metavar="OWNER/REPO#N")
    s.add_argument("--max-rounds", type=int, help="round cap for this run")
    s.add_argument("--no-merge", action="store_true", help="stop at converged; do not merge")
    s.add_argument("--depends-on", action="append", default=[], metavar="OWNER/REPO#N",
                   help="merge only after this PR has merged (repeatable; #N is in the PR's repository); "
                        "joined with the body's Depends-on: lines and kept through edits of the body")

    st = sub.add_parser("status", parents=[config_too], help="show enrolled PRs")
    st.add_argument("pr", nargs="?", metavar="OWNER/REPO#N")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument("--all", action="store_true",
                    help="every PR ever enrolled (default: those not finished, and those finished within a week)")

    sv = sub.add_parser("serve", parents=[config_too], help="run the bot: webhooks, poller, job workers")
    sv.add_argument("--insecure-no-webhook-secret", action="store_true",
                    help="start without github.webhook_secret (every webhook is refused; "
                         "polling alone finds the work)")
    sv.add_argument("--dry-run", action="store_true",
                    help="read and decide everything, write nothing to GitHub (sets github.dry_run)")

    an = sub.add_parser("answer", parents=[config_too], help="answer a PR's open escalation, as a maintainer comment would")
    an.add_argument("pr", metavar="OWNER/REPO#N")
    an.add_argument("text", help="the answer (start with 'decline' to decline the finding)")
    an.add_argument("--by", default="cli", help="who answers (recorded and attributed)")

    sub.add_parser("doctor", parents=[config_too], help="check the database, GitHub access and the fixer set-up")

    demo = sub.add_parser("demo", parents=[config_too], help="run the bot against the built-in simulator, scripted")
    demo.add_argument("--json", action="store_true", help="print one JSON array of the PRs at the end")

    sim = sub.add_parser("simulator", parents=[config_too], help="run the built-in GitHub simulator alone")
    sim.add_argument("--port", type=int, default=8765)
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--scenario", help="scenario TOML file (see docs/simulator.md)")
    sim.add_argument("--webhook-url", help="deliver signed webhooks here")
    sim.add_argument("--webhook-secret", help="secret for X-Hub-Signature-256")

    pr_ = sub.add_parser("prune", parents=[config_too],
                         help="remove the history [retention] says is past its time (the leader does it a batch a poll)")
    pr_.add_argument("--dry-run", action="store_true", help="only say what would go")

    b = sub.add_parser("backup", parents=[config_too],
                       help="copy the SQLite database to a new file, consistent while the bot serves it")
    b.add_argument("path", metavar="PATH", help="the new file (PostgreSQL: use pg_dump, docs/operations.md)")
    rs = sub.add_parser("restored", parents=[config_too],
                        help="mark the database a restored backup (after pg_restore), so the bot looks before it writes")
    rs.add_argument("--taken-at", required=True, metavar="TIME",
                    help="when the dump was taken, ISO 8601 with its zone (e.g. 2026-12-04T10:00:00Z); earlier is safer")
    a = sub.add_parser("abandon", parents=[config_too], help="abandon a PR's active run")
    a.add_argument("pr", metavar="OWNER/REPO#N")
    a.add_argument("--reason", default="abandoned from the command line")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        # Validate input before touching the config or the database.
        args.key = str(parse_pr_key(args.pr)) if getattr(args, "pr", None) else None
        if args.command == "submit":
            args.depends_on = explicit_dependencies(parse_pr_key(args.key), args.depends_on)
        rounds = getattr(args, "max_rounds", None)
        if rounds is not None and not 1 <= rounds <= MAX_ROUNDS:
            raise UsageError(f"--max-rounds must be from 1 to {MAX_ROUNDS}")
        config = load_config(getattr(args, "config", None))
        if args.command not in ("demo", "simulator"):
            normalize_url(config.database.url)
        configure_logging(config.logging.level, config.logging.format)
        return asyncio.run(_dispatch(args, config))
    except (ConfigError, UsageError, PrKeyError, DependencyError, UnsupportedURL) as e:
        print(f"convergebot: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (NoDatabase, DatabaseUnreachable, NoSuchPr, SchemaTooNew) as e:
        print(f"convergebot: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


async def _dispatch(args: argparse.Namespace, config: Config) -> int:
    if args.command == "serve":
        from bot.surfaces.serve import serve

        if args.dry_run:
            config = config.model_copy(update={"github": config.github.model_copy(update={"dry_run": True})})
        return await serve(config, insecure_no_webhook_secret=args.insecure_no_webhook_secret)
    if args.command == "doctor":
        from bot.surfaces.doctor import run_doctor

        return await run_doctor(config)
    if args.command == "demo":
        from bot.surfaces.demo import run_demo

        return await run_demo(as_json=args.json)
    if args.command == "simulator":
        from pathlib import Path

        from simulator import ScenarioError, run_simulator

        try:
            await run_simulator(args.port, Path(args.scenario) if args.scenario else None,
                                args.webhook_url, args.webhook_secret, host=args.host)
        except (ScenarioError, FileNotFoundError) as e:
            raise UsageError(str(e)) from None
        return 0
    if args.command == "backup":
        return await _backup(args, config)
    if args.command == "submit":
        args.repo_config = await _check_pr_exists(config, parse_pr_key(args.key), args.max_rounds is None)
    read_only = args.command in READ_ONLY
    db, revision = await _open(config, create=not read_only)
    try:
        if read_only:
            _require_schema(db, revision)
        elif args.command != "migrate":
            await migrate(db)
        handler = {"migrate": _migrate, "submit": _submit, "status": _status, "abandon": _abandon,
                   "answer": _answer, "prune": _prune, "restored": _restored}
        return await handler[args.command](args, config, db)
    finally:
        await db.dispose()


async def _backup(args: argparse.Namespace, config: Config) -> int:
    """`convergebot backup PATH`: SQLite's online backup of the configured database, made on a
    thread (the copy reads the whole file), its progress logged at each tenth."""
    from pathlib import Path

    from bot.logs import get_logger
    from storage.backup import BackupRefused, backup_sqlite, sqlite_file

    log = get_logger("convergebot.backup")
    shown = [-1]

    def progress(done: int, total: int) -> None:
        if total and (tenth := 10 * done // total) > shown[0]:
            shown[0] = tenth
            log.info("backup.progress", pages=done, of=total)

    try:
        made = await asyncio.to_thread(backup_sqlite, sqlite_file(config.database.url), Path(args.path),
                                       progress=progress)
    except BackupRefused as e:
        print(f"convergebot: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"backup: {made.path}: {made.bytes} bytes, {made.tables} tables, {made.pull_requests} PRs, "
          f"{made.seconds:.1f} s")
    return 0


async def _open(config: Config, *, create: bool) -> tuple[Database, str | None]:
    """The configured database and its schema revision; reaching it is the operator's concern, so
    a refusal is one line (`DatabaseUnreachable`), not the driver's traceback."""
    db = Database(config.database.url, create=create)
    try:
        return db, await current_revision(db)
    except (OSError, DBAPIError) as e:
        await db.dispose()
        raise DatabaseUnreachable(db.where, e) from None


def _require_schema(db: Database, revision: str | None) -> None:
    """A read-only command reads the schema it finds; it neither creates nor migrates one."""
    head = head_revision()
    if revision is not None and not known(revision):
        raise SchemaTooNew(db.where, revision, head)
    if revision != head:
        found = f"is at schema {revision}" if revision else "has no schema"
        raise NoDatabase(f"database {db.where} {found}, newest is {head}: run `convergebot migrate`")


async def _check_pr_exists(config: Config, key: PrKey, repo_settings: bool = False) -> Config:
    """One GET of the PR before enrolling it. A 404 is a typo to report now; when GitHub cannot
    be asked, the PR is enrolled unchecked and the run's first step ends it if it is not there.

    `repo_settings`: also read the repository's `.github/convergebot.toml` (for its max_rounds)
    and return the settings for its PRs; otherwise, or when it cannot be read, `config`."""
    from bot.engine import repoconfig
    from bot.github.client import connect
    from bot.github.errors import GitHubError, NotFound
    from bot.github.installations import NotInstalled

    try:
        async with connect(config) as github:
            await github.pr(key).read()
            if not repo_settings:
                return config
            try:
                found = repoconfig.load(await github.pr(key).file_text(repoconfig.PATH), config)
            except GitHubError as e:
                print(f"convergebot: could not read {repoconfig.PATH} of {key.full_repo} ({e}); "
                      "the global settings apply", file=sys.stderr)
                return config
            if found.problem:
                print(f"convergebot: {key.full_repo}: {found.problem}; the global settings apply", file=sys.stderr)
            return found.config
    except NotInstalled as e:
        raise NoSuchPr(f"{key}: {e} (install it there, or check the repository's name)") from None
    except NotFound:
        raise NoSuchPr(f"{key}: GitHub at {config.github.api_url} has no such pull request "
                       "(or the credentials cannot see it)") from None
    except (GitHubError, OSError) as e:
        print(f"convergebot: could not check {key} on GitHub ({e}); submitting it unchecked: "
              "the run's first step ends it if it does not exist", file=sys.stderr)
    return config


async def _migrate(args, config: Config, db: Database) -> int:
    if args.to != "head" and not known(args.to):
        raise UsageError(f"--to {args.to}: no such schema revision (this release has up to {head_revision()})")
    await migrate(db, args.to)
    print(f"database at revision {await current_revision(db)}")
    return 0


async def _submit(args, config: Config, db: Database) -> int:
    # Without --max-rounds, the repository's (`.github/convergebot.toml`), else the global one.
    max_rounds = args.max_rounds if args.max_rounds is not None else args.repo_config.convergence.max_rounds
    opts = SubmitOptions(
        max_rounds=max_rounds,
        converge_only=args.no_merge or not config.convergence.merge,
        submitted_by="cli",
        depends_on=args.depends_on,
    )
    result = await submit_pr(db, parse_pr_key(args.key), opts)
    if result.outcome is Outcome.STARTED:
        print(f"started {result.pr_key} ({result.process_key})"
              + (f", depending on {', '.join(args.depends_on)}" if args.depends_on else ""))
    else:
        print(f"already running {result.pr_key} ({result.process_key})")
        if args.depends_on:
            print(f"convergebot: {result.pr_key}'s dependencies are unchanged: --depends-on is recorded when "
                  "a run starts (a Depends-on: line in the PR's body adds one to a running PR)", file=sys.stderr)
    return 0


async def _status(args, config: Config, db: Database) -> int:
    if args.key:
        key = args.key
        view = await prs.get(db, key)
        if view is None:
            print(f"convergebot: {key} is not enrolled", file=sys.stderr)
            return 1
        if args.json:
            # One PR: its full detail, the shape GET /api/prs/{owner}/{repo}/{number} answers.
            print(json.dumps(await pr_detail(db, view, config.budget, asked_reviewers(config)), indent=2))
            return 0
        rows = await prs_json(db, [view], asked_reviewers(config))
    else:
        # Page by page, as the API reads them: the database picks each page through its indexes.
        query, rows = ListQuery(scope="all" if args.all else "current", limit=prs.PAGE_LIMIT), []
        while True:
            got, page = await list_page(db, query, asked_reviewers(config))
            rows += got
            if page.next is None:
                break
            query = replace(query, after=page.next)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        history = not args.all and (await prs.page(db, limit=1)).total > 0
        print("no PR current (none unfinished, none finished within a week): `status --all` lists every one"
              if history else "no PRs enrolled")
        return 0
    header = ("PR", "STATUS", "ROUND", "RUN", "WAITING ON", "SINCE", "UPDATED", "DEPENDS ON")
    table = [header] + [
        (r["pr_key"], r["status"], f"{r['round']}/{r['max_rounds']}", r["process_key"] or "-",
         r["waiting_on"] or "-", (r["waiting_since"] or "-")[:19], r["updated_at"][:19], dependencies_text(r))
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


async def _restored(args, config: Config, db: Database) -> int:
    """`convergebot restored --taken-at TIME`: the mark `convergebot backup` puts in its copies,
    for a database restored some other way (`pg_restore`); run it before the bot starts."""
    try:
        taken = datetime.fromisoformat(args.taken_at.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--taken-at: not an ISO 8601 time: {args.taken_at[:60]!r}") from None
    if taken.tzinfo is None:
        raise UsageError("--taken-at: give the time's zone (e.g. 2026-12-04T10:00:00Z)")
    if taken > utcnow():
        raise UsageError("--taken-at: a time in the future")
    await mark_restored(db, taken.astimezone(UTC))
    print(f"marked as restored from a backup taken at {taken.astimezone(UTC).isoformat()}: the bot "
          "looks on GitHub before each write until the runs it held have moved on")
    return 0


async def _prune(args, config: Config, db: Database) -> int:
    """`convergebot prune [--dry-run]`: what `[retention]` says is past its time, a batch at a
    time until none is left (or, dry, counted). Safe beside a running `serve`: every batch is a
    short transaction of its own, and compaction cuts text that is already cut to the same."""
    settings = retention_settings(config.retention)
    swept = await retention.sweep(db, settings, utcnow(), dry_run=args.dry_run, passes=1 if args.dry_run else 10**9)
    said = swept.as_dict()
    freed = said.pop("text_bytes_freed")
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb}: " + ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in said.items())
          + f"; text {'to free' if args.dry_run else 'freed'}: {freed / 1e6:.1f} MB")
    if not args.dry_run and swept.anything:
        print("the database file does not shrink by itself: docs/operations.md, \"Retention\", says how")
    return 0


async def _answer(args, config: Config, db: Database) -> int:
    """The same answer path as `/converge answer`; the running `serve` picks up the work."""
    from bot.engine.commands import answer
    from bot.github.client import connect
    from bot.rules.commands import Command
    from bot.runtime.context import Runtime
    from bot.surfaces.serve import build_fixer

    view = await prs.get(db, args.key)
    if view is None or view.resubmittable:
        print(f"convergebot: {args.key} has no active run", file=sys.stderr)
        return 1
    if not args.text.strip():
        raise UsageError("the answer is empty")
    async with connect(config) as github:
        rt = Runtime(config, db, github)
        rt.fixer = build_fixer(config)
        accepted, message = await answer(rt, view.pr, Command("answer", text=args.text.strip()), args.by)
    if not accepted:
        print(f"convergebot: {message}", file=sys.stderr)
        return 1
    print(f"answered {args.key}; the run resumes")
    return 0


async def _abandon(args, config: Config, db: Database) -> int:
    key = args.key
    if await abandon_pr(db, key, args.reason):
        print(f"abandoned {key}")
        return 0
    print(f"convergebot: {key} has no active run", file=sys.stderr)
    return 1
