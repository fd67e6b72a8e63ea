"""`convergebot doctor`: check what `serve` needs before running it, one line per check."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.config import Config, ConfigError
from bot.fixers import presets
from bot.fixers.environment import GitIdentity, fixer_env
from bot.fixers.presets import PRESETS
from bot.fixers.sandbox import SandboxUnavailable, sandbox_for
from bot.github.client import connect
from bot.github.errors import GitHubError
from bot.intake.redelivery import Log
from storage.database import Database
from storage.migrate import current_revision, head_revision
from storage.urls import NoDatabase, connect_failure


async def run_doctor(config: Config, say: Callable[[str], None] = print) -> int:
    failures = 0

    def check(ok: bool, what: str, detail: str = "", *, warn: bool = False) -> None:
        nonlocal failures
        mark = "ok  " if ok else ("warn" if warn else "FAIL")
        failures += 0 if ok or warn else 1
        say(f"[{mark}] {what}{': ' + detail if detail else ''}")

    try:
        db = Database(config.database.url, create=False)  # the doctor looks; it creates nothing
    except NoDatabase as e:
        check(False, "database sqlite", str(e))
    else:
        try:
            revision, head = await current_revision(db), head_revision()
            check(revision == head, f"database {db.backend}", f"schema {revision or 'empty'}, newest {head}"
                  + ("" if revision == head else " (run `convergebot migrate`)"))
        except Exception as e:
            check(False, f"database {db.backend}", f"{type(e).__name__}: {connect_failure(e)}")
        finally:
            await db.dispose()

    gh_cfg = config.github
    private_key = None
    if gh_cfg.private_key_path:
        try:
            with open(gh_cfg.private_key_path) as f:
                private_key = f.read()
        except OSError as e:
            check(False, "GitHub App private key", str(e))
    app = bool(gh_cfg.app_id and private_key)
    kind = ("GitHub App, installation " + str(gh_cfg.installation_id) if gh_cfg.installation_id
            else "GitHub App, every installation")
    check(app or bool(gh_cfg.token.get_secret_value()), "GitHub credentials",
          kind if app else ("token" if gh_cfg.token.get_secret_value() else "none configured"))
    try:
        async with connect(config) as client:
            try:
                if client.per_installation:
                    await _installations(client, gh_cfg.api_url, check)
                else:
                    core = (await client.rate_limit()).get("resources", {}).get("core", {})
                    check(True, f"GitHub API at {gh_cfg.api_url}",
                          f"rate limit {core.get('remaining', '?')}/{core.get('limit', '?')}")
            except GitHubError as e:
                check(False, f"GitHub API at {gh_cfg.api_url}", str(e))
            if not client.is_app:
                await _hook_logs(client, config, check)
    except ConfigError:
        pass  # the unreadable private key was reported above

    if gh_cfg.dry_run:
        # Not a failure: said so that nobody takes a quiet bot for a broken one, or the reverse.
        check(False, "dry run", "on (github.dry_run): serve reads and decides, and writes nothing to GitHub",
              warn=True)
    check(bool(gh_cfg.webhook_secret.get_secret_value()), "webhook secret",
          "" if gh_cfg.webhook_secret.get_secret_value() else "not set: every webhook will be refused (401)",
          warn=True)
    fixer = config.fixer
    if fixer.kind == "fake":
        check(False, "fixer", "kind = fake is for tests and the demo; serve refuses it")
    elif fixer.kind == "command":
        _command_fixer(config, check)
    else:
        check(True, "fixer", fixer.kind)
    git = shutil.which("git")
    version = subprocess.run([git, "--version"], capture_output=True, text=True).stdout.strip() if git else ""
    check(bool(git), "git", version or "not found (the command fixer needs it)", warn=fixer.kind != "command")
    say("all checks passed" if not failures else f"{failures} check(s) failed")
    return 0 if not failures else 1


async def _installations(client, api_url: str, check) -> None:
    """An App serving every installation: the accounts it is installed on, each with its own
    rate limit (one line each)."""
    found = await client.app_installations()
    check(bool(found), f"GitHub App installations at {api_url}",
          f"{len(found)}" if found else "none: install the App on an organisation or account")
    for installation in found:
        account = (installation.get("account") or {}).get("login", "?")
        with client.for_installation(int(installation["id"])):
            core = (await client.rate_limit()).get("resources", {}).get("core", {})
        check(True, f"installation {installation['id']} on {account}",
              f"rate limit {core.get('remaining', '?')}/{core.get('limit', '?')}")


async def _hook_logs(client, config: Config, check) -> None:
    """With a token: each webhook named in `[webhooks] hooks` has a delivery log the token can
    read (one entry), or the redelivery of its lost deliveries cannot work."""
    hooks = config.webhooks.hooks
    if not config.webhooks.redelivery:
        return
    if not hooks:
        check(False, "webhook delivery logs", "none named in [webhooks] hooks: a lost webhook is found "
              "only by the poll and the scan, which read more often for it", warn=True)
        return
    for owner, hook_id in hooks.items():
        path = Log.named(owner, hook_id).hook
        try:
            await client.hook_deliveries(per_page=1, hook=path)
        except GitHubError as e:
            check(False, f"webhook delivery log {path}",
                  f"{e} (the token needs admin rights on the hook: see [webhooks] hooks in config.example.toml)")
        else:
            check(True, f"webhook delivery log {path}", "readable")


VERSION_TIMEOUT_SECONDS = 60.0


def _command_fixer(config: Config, check) -> None:
    """The `command` fixer's program found, its version, that it starts inside the sandbox, and
    for a preset: its state directories writable and its model's key set (docs/fixers.md)."""
    fixer = config.fixer
    preset = PRESETS.get(fixer.preset)
    what = f"fixer command (preset {preset.name})" if preset else "fixer command"
    program = presets.program(fixer.command, fixer.preset)
    found = shutil.which(program) if program else None
    if not found:
        check(False, what, f"{program} not found on PATH: install it, or name its path in fixer.command"
              if program else "fixer.command is empty")
        return
    check(True, what, found)
    env = fixer_env(GitIdentity(), {}, ())
    for name, value in preset.env if preset else ():
        env.setdefault(name, value)
    state = preset.state_paths() if preset else ()
    # Looked at before the CLI first runs here: its --version may create them itself.
    if preset:  # the state directories are a preset's
        for path in state:
            if path.exists():
                check(os.access(path, os.W_OK), f"{preset.name} state {path}",
                      "writable" if os.access(path, os.W_OK) else "not writable by the bot's user")
            else:
                parent = next((p for p in path.parents if p.exists()), Path("/"))
                check(os.access(parent, os.W_OK), f"{preset.name} state {path}",
                      "missing; serve creates it at start" if os.access(parent, os.W_OK)
                      else f"missing, and {parent} is not writable by the bot's user")
    if preset:
        version = _run([found, "--version"], env)
        check(version.ok, f"{preset.name} version", version.line or "printed nothing")
    if preset and preset.keys:
        named = [k for k in preset.keys if os.environ.get(k)]
        check(bool(named), f"{preset.name} model key", f"{named[0]} is set" if named else
              f"none of {', '.join(preset.keys)} is set: set one in the bot's environment, or log the "
              f"CLI in (its state lives in {', '.join('~/' + s for s in preset.state)})", warn=True)
    try:
        sandbox = sandbox_for(fixer.sandbox, hide=config.secret_files(),
                              write=(*fixer.sandbox_write, *state), create=False, quiet=True)
    except SandboxUnavailable as e:
        check(False, "fixer sandbox", str(e))
        return
    if sandbox is None:
        check(False, "fixer sandbox", "off: the agent runs with the bot's rights", warn=True)
        return
    with tempfile.TemporaryDirectory(prefix="convergebot-doctor-") as d:
        repo = Path(d) / "repo"
        repo.mkdir()
        inside = _run(sandbox.wrap([found, "--version"] if preset else [found, "--help"], repo=repo,
                                   inputs=(), workdir=Path(d)), env)
    check(inside.ok, f"{preset.name if preset else program} in the sandbox",
          ("starts" + (f" ({inside.line})" if inside.line and preset else "")) if inside.ok
          else f"does not start: {inside.line or 'no output'}")


@dataclass(frozen=True)
class _Ran:
    ok: bool
    line: str


def _run(argv: list[str], env: dict[str, str]) -> _Ran:
    """Run `argv` briefly; its first line of output (stderr when it failed), cut to 200 chars."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env,
                              timeout=VERSION_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as e:
        return _Ran(False, type(e).__name__)
    text = (done.stdout if done.returncode == 0 else done.stderr or done.stdout).strip()
    return _Ran(done.returncode == 0, text.splitlines()[0][:200] if text else "")
