"""`convergebot doctor`: check what `serve` needs before running it, one line per check."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

from storage.database import Database, NoDatabase, connect_failure
from storage.migrate import current_revision, head_revision

from .config import Config
from .fixers.presets import PRESETS
from .github.client import connect
from .github.errors import GitHubError
from .redelivery import Log


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
    except OSError:
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
        preset = PRESETS.get(fixer.preset)
        program = fixer.command[0] if fixer.command else preset.program if preset else ""
        check(bool(program and shutil.which(program)),
              f"fixer command (preset {preset.name})" if preset else "fixer command",
              program or "fixer.command is empty")
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
