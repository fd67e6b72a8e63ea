"""`convergebot serve`: one process with the HTTP server, the scheduler and the job workers."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import structlog
import uvicorn
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from sqlalchemy.exc import DBAPIError
from sqlmodel import select

from bot import metrics
from bot.config import Config, ConfigError
from bot.effects.runner import run_effect
from bot.engine import outbox
from bot.engine.commands import handle_command
from bot.engine.enroll import enroll
from bot.engine.fixing import fix
from bot.engine.outbox import DRY_RUN
from bot.engine.progress import progress_check
from bot.engine.refs import sync_ref
from bot.engine.step import step
from bot.fixers.presets import PRESETS
from bot.fixers.registry import build_fixer as build
from bot.fixers.sandbox import SandboxUnavailable, sandbox_for
from bot.github.client import connect
from bot.github.errors import RateLimited
from bot.intake import redelivery, scan
from bot.intake.poller import Poller
from bot.runtime.context import Runtime
from bot.runtime.workers import PoolSettings, Reschedule, WorkerPool
from bot.surfaces.web.app import build_app
from bot.surfaces.web.health import missing_setup
from sharedio.children import children_watched_by_pidfd
from storage import backup
from storage.database import Database
from storage.migrate import migrate
from storage.models import Job, utcnow
from storage.statuses import JobKind
from storage.urls import DatabaseUnreachable

log = structlog.get_logger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: the process decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield

    @property
    def port(self) -> int:
        return self.servers[0].sockets[0].getsockname()[1]


def job_handlers(rt: Runtime) -> dict[str, Callable]:
    def wrap(kind: str, fn):
        async def handler(job):
            started = time.monotonic()
            try:
                await fn(rt, job)
            except RateLimited as e:
                metrics.GITHUB_RATE_LIMITED.inc()
                metrics.JOBS.labels(kind, "rate_limited").inc()
                raise Reschedule(e.retry_at, str(e)) from e
            except Exception:
                metrics.JOBS.labels(kind, "error").inc()
                raise
            finally:
                metrics.JOB_SECONDS.labels(kind).observe(time.monotonic() - started)
            metrics.JOBS.labels(kind, "done").inc()
            metrics.job_done(job.pr_key, started)

        return handler

    return {
        JobKind.SYNC: wrap(JobKind.SYNC, step),
        JobKind.SYNC_REF: wrap(JobKind.SYNC_REF, sync_ref),
        JobKind.FIX: wrap(JobKind.FIX, fix),
        JobKind.PROGRESS_CHECK: wrap(JobKind.PROGRESS_CHECK, progress_check),
        JobKind.COMMAND: wrap(JobKind.COMMAND, handle_command),
        JobKind.ENROLL: wrap(JobKind.ENROLL, enroll),
        "effect": wrap("effect", run_effect),
    }


def build_fixer(config: Config):
    f = config.fixer
    if (f.preset or f.preset_args) and f.kind != "command":
        raise ConfigError(f'config: fixer.preset is for kind = "command", not {f.kind!r}')
    if f.kind == "command":
        preset = PRESETS.get(f.preset)
        try:
            # A preset's CLI writes its own state: those directories, and nothing else of the home.
            sandbox = sandbox_for(f.sandbox, hide=(*config.secret_files(), *f.sandbox_hide),
                                  write=(*f.sandbox_write, *(preset.state_paths() if preset else ())))
        except SandboxUnavailable as e:
            raise ConfigError(str(e)) from None
        try:
            return build("command", argv=f.command, timeout_seconds=f.timeout_seconds,
                         sandbox=sandbox, preset=f.preset, preset_args=f.preset_args)
        except ValueError as e:  # a preset with a full command, say: named, not a traceback
            raise ConfigError(f"config: {e}") from None
    if f.kind == "mention":
        return build("mention", mention=f.mention)
    if f.kind == "fake":
        return build("fake", script=f.fake_script)
    return build("author")


@contextlib.contextmanager
def sole_server(db: Database) -> Iterator[None]:
    """On a SQLite file, refuse to be its second `serve`: a SQLite file serves one process
    (its per-PR turns and its poller are in-process only). A lock file beside the database is
    held while serving; the kernel lets go of it when the process ends, however it ends."""
    if db.sqlite_file is None:
        yield
        return
    lock_path = db.sqlite_file.with_name(db.sqlite_file.name + ".serve-lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"another `convergebot serve` is running on {db.sqlite_file}: a SQLite database serves "
                "one process. Stop that one, or run replicas on PostgreSQL (docs/architecture.md, "
                "\"Replicas\").") from None
        yield
    finally:
        os.close(fd)


@asynccontextmanager
async def running(config: Config, *, fixer=None, freeze: bool = False) -> AsyncIterator[tuple[Runtime, _Server]]:
    """Everything `serve` runs, started in order and stopped in reverse; yields once listening.

    `fixer` overrides the configured one (the demo and tests hand in a scripted fixer). `freeze`:
    the process is `serve` (one stack for its whole life): what start-up made is frozen out of
    the garbage collector's full passes. A process that starts many stacks (the tests) must not:
    a frozen object is never collected.
    """
    listening = _listen(config.server.host, config.server.port)
    with contextlib.closing(listening):
        fixer = fixer or build_fixer(config)
        jc = config.jobs
        # On PostgreSQL each step holds a connection for its PR's turn besides its sessions'.
        db = Database(config.database.url, pool_size=max(10, 2 * jc.workers + jc.fixer_workers + 4))
        with sole_server(db), children_watched_by_pidfd():
            try:
                async with _running(config, db, fixer, listening, freeze) as both:
                    yield both
            finally:
                # After a start that failed too: a SQLite engine left open kept the process from ending.
                await db.dispose()


def _listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything starts. uvicorn binds its own late and, when the
    port is taken, ends the process with SystemExit from inside a task; here a taken port is one
    ConfigError the command line prints."""
    # IPPROTO_TCP named, not left 0: asyncio turns TCP_NODELAY on for the connections it accepts
    # only on such a socket. Without it each response's body (written after its head) waited
    # for the client's delayed ACK, ~45 ms, and held /webhook to ~300 deliveries/s.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigError(f"server: cannot listen on {host}:{port} (server.host, server.port): "
                          f"{e.strerror or e}") from None
    return sock


@asynccontextmanager
async def _running(config: Config, db: Database, fixer, listening: socket.socket,
                   freeze: bool) -> AsyncIterator[tuple[Runtime, _Server]]:
    try:
        await migrate(db)
    except (OSError, DBAPIError) as e:  # refused, unresolvable, no such database, bad password
        raise DatabaseUnreachable(db.where, e) from None
    await _say_dry_run(config, db)
    outbox.MEMORY.restore = restore = await backup.restored(db)
    if restore is not None:
        log.warning("database.restored", taken_at=restore.taken_at.isoformat(),
                    restored_at=restore.restored_at.isoformat(),
                    meaning="GitHub may be ahead of the database: every write looks first until "
                            "the runs active at the restore have moved on")
    # One GitHub client for the whole process, opened before the server and the scheduler.
    async with connect(config) as github:
        rt = Runtime(config, db, github)
        rt.health.started_at = utcnow()
        rt.fixer = fixer
        jc = config.jobs
        pool = WorkerPool(db, job_handlers(rt), PoolSettings(
            workers=jc.workers, lease_seconds=jc.lease_seconds, idle_poll_seconds=jc.idle_poll_seconds,
            backoff_base_seconds=jc.backoff_base_seconds, backoff_cap_seconds=jc.backoff_cap_seconds,
            outage_backoff_cap_seconds=jc.outage_backoff_cap_seconds,
            long_kinds=(JobKind.FIX,), long_workers=jc.fixer_workers,
        ))
        rt.wake = pool.wake
        scheduler = AsyncIOScheduler(timezone="UTC")
        poller = Poller(rt)
        poller.schedule(scheduler)
        if config.github.dry_run:
            # Asking GitHub to send a delivery again is a write (the client would refuse it).
            log.info("redelivery.off", reason="dry run: asking GitHub to redeliver is a write")
        else:
            redelivery.schedule(rt, scheduler)  # webhooks GitHub never delivered (docs/architecture.md)
        scan.schedule(rt, scheduler)  # enrollment intent no webhook brought (docs/architecture.md)
        server = _Server(uvicorn.Config(
            build_app(rt), host=config.server.host, port=config.server.port, log_config=None,
            lifespan="off", access_log=False,
        ))
        server_task = asyncio.create_task(server.serve(sockets=[listening]))
        try:
            while not server.started:
                if server_task.done():
                    server_task.result()
                    raise RuntimeError("the HTTP server stopped during start-up")
                await asyncio.sleep(0.02)
            scheduler.start()
            rt.health.scheduler_running = True
            pool.start()
            # What start-up made lives as long as the process: the imported code and its tables,
            # some 145,000 objects. Frozen, a full garbage collection no longer walks them: it held
            # the event loop 75-160 ms each time (bench/year.py's worst stalls, on any database).
            if freeze:
                gc.collect()
                gc.freeze()
            # How many were frozen: counted once here (the count walks them all: 25 ms).
            log.info("server.listening", host=config.server.host, port=server.port,
                     frozen_objects=gc.get_freeze_count() if freeze else 0)
            if missing := missing_setup(config):
                log.warning("server.not_ready", problems=missing,
                            consequence="/readyz answers 503 until they are fixed")
            yield rt, server
        finally:
            # Stop taking webhooks, stop polling, let running jobs finish (or hand them back).
            server.should_exit = True
            if scheduler.running:
                scheduler.pause()
            rt.health.scheduler_running = False
            await pool.stop(config.server.shutdown_grace_seconds)
            # A tick under way ends first (it is short): shutting the scheduler down cancels it
            # halfway otherwise, which APScheduler logs as the tick's error.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(poller.finish(), config.server.shutdown_grace_seconds)
            if scheduler.running:
                scheduler.shutdown(wait=False)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(server_task, timeout=5)
            await rt.leadership.release()
            log.info("server.stopped")


async def _say_dry_run(config: Config, db: Database) -> None:
    """Log the dry run at start; or, serving for real, refuse a database that holds a dry run's
    decisions: they were never made on GitHub, and a real run on them would stay where the dry
    run stopped (a dry-run merge holds its PR at `merging`, a dry-run fix job never runs, its
    round's deadline check is held). A dry run belongs in a database of its own
    (docs/architecture.md, "Dry run")."""
    if config.github.dry_run:
        log.warning("server.dry_run", consequence="reads and decides everything; no GitHub write is made")
        return

    async with db.read_session() as s:
        left = (await s.exec(select(Job.id).where(Job.status == DRY_RUN).limit(1))).first()
    if left is not None:
        raise ConfigError(f"database {db.where} holds a dry run's decisions, never made on GitHub: "
                          "serve for real from a database of its own (or keep --dry-run)")


async def serve(config: Config, *, insecure_no_webhook_secret: bool = False) -> int:
    if config.fixer.kind == "fake":
        # The scripted fixer pushes canned commits: fine for tests and the demo, never for real PRs.
        raise ConfigError("fixer.kind = \"fake\" exists for tests and the demo only; serve refuses it")
    if config.fixer.kind == "command" and not (config.fixer.command or config.fixer.preset):
        raise ConfigError("fixer.kind = \"command\" needs fixer.command or fixer.preset")
    if not config.github.webhook_secret.get_secret_value():
        # Every webhook would be refused (401): the bot would hear of nothing but by polling,
        # and an operator who forgot the secret should learn it at start, not from a slow bot.
        if not insecure_no_webhook_secret:
            raise ConfigError("github.webhook_secret is not set (nor github.webhook_secret_file): "
                              "every webhook would be refused. Set it, or start with "
                              "--insecure-no-webhook-secret to run on polling alone")
        log.warning("server.no_webhook_secret", consequence="every webhook is refused (401); "
                    "PRs are found by polling and the repository scan only")
    loop = asyncio.get_running_loop()
    received: asyncio.Future[signal.Signals] = loop.create_future()

    def stop_on(sig: signal.Signals) -> None:
        if not received.done():  # the first one stops it; more change nothing
            received.set_result(sig)

    # SIGHUP too (a closed terminal, a supervisor's reload): its default would end the process at
    # once, its jobs still leased. Nothing is reloaded; a changed config needs a restart.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop_on, sig)
    async with running(config, freeze=True):
        stopped_by = await received
        log.info("server.stopping", reason="signal", signal=stopped_by.name)
    return 0
