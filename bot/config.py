"""The one config loader: a TOML file, then CONVERGEBOT_<SECTION>_<KEY> environment overrides."""

from __future__ import annotations

import json
import os
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
)

from bot.rules import reviewers as _reviewers
from bot.rules.model import DEFAULT_MAX_ROUNDS, MAX_ROUNDS
from storage import retention

ENV_PREFIX = "CONVERGEBOT_"
CONFIG_PATH_ENV = "CONVERGEBOT_CONFIG"
DEFAULT_CONFIG_FILE = "convergebot.toml"
FILE_SUFFIX = "_file"  # `<key>_file` names a file that holds the secret `<key>`


class ConfigError(Exception):
    """An invalid configuration; the message names the offending key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatabaseConfig(_Section):
    url: str = "sqlite:///./convergebot.db"
    url_file: str = ""


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"


class JobsConfig(_Section):
    workers: int = Field(8, ge=1, le=64)
    # Workers that run only fixer jobs (which may take minutes), besides `workers`.
    fixer_workers: int = Field(4, ge=1, le=64)
    lease_seconds: float = Field(60.0, gt=0)
    max_attempts: int = Field(8, ge=1)
    backoff_base_seconds: float = Field(2.0, gt=0)
    backoff_cap_seconds: float = Field(600.0, gt=0)
    idle_poll_seconds: float = Field(1.0, gt=0)
    # While the database is unreachable a worker looks again after a pause that doubles from
    # idle_poll_seconds up to this (jittered), and logs only when it first fails and recovers.
    outage_backoff_cap_seconds: float = Field(30.0, gt=0)


class GitHubConfig(_Section):
    api_url: str = "https://api.github.com"
    token: SecretStr = SecretStr("")
    token_file: str = ""
    app_id: str = ""
    private_key_path: str = ""
    installation_id: int = 0  # 0: an App serves every installation (looked up per repository)
    webhook_secret: SecretStr = SecretStr("")
    webhook_secret_file: str = ""
    bot_login: str = "convergebot[bot]"
    timeout_seconds: float = Field(10.0, gt=0)
    read_timeout_seconds: float = Field(30.0, gt=0)
    # The HTTP cache of GitHub's answers (each read is revalidated with its ETag, so an unchanged
    # one spends no rate limit): at most this much memory, the least recently read going first,
    # and no answer nobody read for this long (a PR still driven is re-read at least every
    # `poller.full_sync_seconds`; a finished PR's answers are never read again).
    http_cache_megabytes: float = Field(64.0, ge=1)
    http_cache_idle_minutes: float = Field(30.0, gt=0)
    max_concurrency: int = Field(8, ge=1, le=100)
    reserve_fraction: float = Field(0.2, ge=0, lt=1)
    # /readyz fails once no GitHub request has been answered for this long (5xx, timeouts,
    # connections refused); a 401 fails it at once.
    unreachable_after_seconds: float = Field(300.0, gt=0)
    # A check-run update waits this long for the PR's next stage to fold in: stages that follow
    # within it cost one write (a run's end waits a second).
    check_run_settle_seconds: float = Field(5.0, ge=0, le=300)
    # ...and while the PR is on the way to the merge (waiting for dependencies or the merge,
    # merging) with other work due or running (its sync, the merge), it waits on, this long at
    # most after it was queued: those stages cost no write of their own. A round's do.
    check_run_hold_seconds: float = Field(300.0, ge=0, le=3600)
    # ...and while a round's fixer is due or at work, this long at most: a fixer that pushes
    # within it costs no write on the head it leaves (the next head's run shows the next round),
    # and a longer one still shows.
    check_run_fix_hold_seconds: float = Field(60.0, ge=0, le=3600)
    # Read and decide everything, write nothing to GitHub: effects are recorded as `dry_run`,
    # the fixer does not run, and the client refuses any write (docs/architecture.md, "Dry run").
    dry_run: bool = False

    @property
    def has_credentials(self) -> bool:
        """A token, or an App's id and private key: without either, GitHub answers the bot as
        nobody (60 reads an hour, no write)."""
        return bool(self.token.get_secret_value() or (self.app_id and self.private_key_path))


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    api_token: SecretStr = SecretStr("")
    api_token_file: str = ""
    shutdown_grace_seconds: float = Field(5.0, ge=0)
    webhook_batch_wait_seconds: float = Field(0.002, ge=0, le=1)
    webhook_batch_max: int = Field(64, ge=1, le=1000)


# An organisation ("acme") or a repository ("acme/widgets"), as `[webhooks] hooks` names a
# webhook's owner.
HookOwner = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]*(/[A-Za-z0-9._-]+)?$")]


class WebhooksConfig(_Section):
    # A GitHub App reads its webhook delivery log and asks GitHub again for deliveries that
    # never reached /webhook (GitHub does not retry by itself). With a token, the logs of the
    # webhooks named in `hooks`.
    redelivery: bool = True
    # With a token: the organisation's or repository's webhooks that send to this bot, by
    # owner and hook id (`{ acme = 123, "acme/widgets" = 456 }`). An App reads its own log.
    hooks: dict[HookOwner, Annotated[int, Field(gt=0)]] = {}
    redelivery_interval_seconds: float = Field(300.0, gt=0)
    # The first read of the log goes back this far (GitHub keeps three days).
    redelivery_lookback_hours: float = Field(24.0, gt=0, le=72)
    # Redeliveries asked for one delivery at most, counted from the log (restarts included).
    redelivery_max_attempts: int = Field(3, ge=1, le=10)
    # A check run or suite naming more PRs than this queues one job for the enrolled PRs at its
    # head sha instead of a sync per PR.
    max_prs_per_delivery: int = Field(100, ge=1, le=10000)


class PollerConfig(_Section):
    interval_seconds: float = Field(60.0, gt=0)
    jitter_seconds: float = Field(5.0, ge=0)
    # A repository with at least this many PRs waiting for a review is watched through its
    # PR list (one conditional read) instead of re-reading each of them; 0 turns that off.
    # Elsewhere such PRs rest on their webhooks while the redelivery recovers lost ones.
    repo_watch_min_prs: int = Field(4, ge=0)
    # Even so, each resting PR is re-read at least this often (spread over the ticks).
    full_sync_seconds: float = Field(900.0, gt=0)
    # A PR whose step read it from GitHub this recently, or with a job of its own queued to run
    # within the interval, is left out of the tick: its own work reads it. 0 turns both off.
    fresh_read_seconds: float = Field(30.0, ge=0)


class ScanConfig(_Section):
    # Every interval, the repositories are read for enrollment intent no webhook brought.
    enabled: bool = True
    interval_seconds: float = Field(300.0, gt=0)
    # While the redelivery recovers lost webhooks, a scan runs at most this often: what it
    # is left to find is a delivery GitHub never attempted.
    covered_interval_seconds: float = Field(1800.0, gt=0)
    # With a token: the repositories to read besides those of enrolled PRs (an App reads its
    # installation's).
    repositories: list[Annotated[str, StringConstraints(pattern=r"^[^/\s]+/[^/\s]+$")]] = []
    # The first read of a repository goes back this far.
    lookback_hours: float = Field(24.0, gt=0)


class ConvergenceConfig(_Section):
    max_rounds: int = Field(DEFAULT_MAX_ROUNDS, ge=1, le=MAX_ROUNDS)
    merge: bool = True
    reviewers: list[str] = ["copilot-pull-request-reviewer[bot]"]
    # `[[convergence.reviewer]]` tables: each reviewer's kind, trigger, whether a round waits for
    # it and for how long (bot/rules/reviewers.py). When given, they are the list and `reviewers` is not read.
    reviewer: list[_reviewers.ReviewerConfig] = []
    review_wait_timeout_seconds: float = Field(1800.0, gt=0)
    nudge_window_seconds: float = Field(600.0, gt=0)
    required_checks: list[str] = []
    maintainers: list[str] = []
    label: str = "converge"
    auto_enroll_authors: list[str] = []
    escalation_heal_grace_seconds: float = Field(300.0, ge=0)
    churn_rounds: int = Field(4, ge=2)
    # The least severe finding that holds convergence back (critical > major > minor > nit):
    # "nit", every finding blocks; "major", a run converges with only minor findings and nits
    # left, which the check run lists and the fixer may still take up (bot/rules/severity.py).
    block_on: Literal["critical", "major", "minor", "nit"] = "nit"

    @field_validator("reviewer")
    @classmethod
    def _reviewers_usable(cls, value: list[_reviewers.ReviewerConfig]) -> list[_reviewers.ReviewerConfig]:
        return _reviewers.validate(value)


class MergeConfig(_Section):
    method: Literal["squash", "merge", "rebase"] = "squash"
    require_approval: bool = False
    update_branch: bool = True
    # A converged PR that conflicts with its base goes back to the fixer (a "conflict" round)
    # this many times in a run, then escalates naming the files.
    conflict_attempts: int = Field(2, ge=0, le=20)
    # A converged PR whose required checks fail goes back to the fixer (a "ci" round) this many
    # times in a run, then escalates naming the checks.
    ci_fix_attempts: int = Field(2, ge=0, le=20)
    # GitHub computes mergeability lazily: "unknown" is re-read with a growing delay, and
    # escalated ("mergeability stalled") once it lasts this long.
    mergeability_timeout_seconds: float = Field(600.0, gt=0)
    # A required check that has not reported on the head this long after the wait on that head
    # began (a workflow without the trigger, a push that starts no workflow, a CI outage)
    # escalates once, naming it, instead of holding the PR for ever.
    checks_timeout_seconds: float = Field(3600.0, gt=0)


class DashboardConfig(_Section):
    # A PR waiting on the same thing longer than this is marked on the dashboard's list, which
    # can show those alone.
    stale_after_seconds: float = Field(86400.0, gt=0)


class RetentionConfig(_Section):
    # Finished runs keep their rounds' and escalations' full text this many days, then each text
    # is cut to its first 200 characters (the rows stay); 0 keeps it for ever.
    history_days: float = Field(90.0, ge=0)
    # A comment's once-only record, long after any redelivery or scan could bring it again.
    commands_days: float = Field(30.0, ge=7)
    jobs_days: float = Field(1.0, gt=0)  # finished jobs
    failed_jobs_days: float = Field(7.0, gt=0)
    deliveries_days: float = Field(7.0, ge=1)  # webhook deliveries (their dedupe window)
    # Rows of each kind removed (or runs compacted) per poll tick, by the leader.
    batch: int = Field(500, ge=1, le=10_000)


def retention_settings(cfg: RetentionConfig) -> retention.Settings:
    return retention.Settings(**cfg.model_dump())


class BudgetConfig(_Section):
    comments_per_hour: int = Field(60, ge=1)
    writes_per_hour: int = Field(400, ge=1)


class FixerConfig(_Section):
    kind: Literal["command", "mention", "author", "fake"] = "author"
    command: list[str] = []
    # A known agent CLI's unattended invocation instead of a hand-written `command`
    # (docs/fixers.md, "Presets"); with a preset, `command` may only name the program's path.
    preset: Literal["", "claude-code", "codex", "gemini", "aider", "copilot"] = ""
    # Extra flags appended to the preset's own (a model, an allowed tool).
    preset_args: list[str] = []
    timeout_seconds: float = Field(1800.0, gt=0)
    # What the agent may spend (docs/fixers.md, "Cost and time"); 0 is no cap. Past a run's
    # cap its PR is escalated naming the figure, and no fixer of that run starts until a
    # maintainer answers (which buys the run a fresh budget); past the hourly cap, across all
    # PRs, every fixer waits until the last hour's spend is under it again.
    max_cost_usd_per_run: float = Field(0.0, ge=0)
    max_minutes_per_run: float = Field(0.0, ge=0)
    max_cost_usd_per_hour: float = Field(0.0, ge=0)
    # Prices of the CLIs that report tokens and no cost (codex, gemini, copilot).
    usd_per_million_input_tokens: float = Field(0.0, ge=0)
    usd_per_million_output_tokens: float = Field(0.0, ge=0)
    mention: str = "@copilot"
    fake_script: list[str] = ["push"]
    # Where the `command` fixer runs: in a bubblewrap sandbox (`bwrap`), not at all sandboxed
    # (`off`), or sandboxed where bubblewrap works and otherwise not, with a warning (`auto`).
    sandbox: Literal["auto", "bwrap", "off"] = "auto"
    # Paths the sandboxed command may write besides its clone (e.g. an agent's state directory).
    sandbox_write: list[str] = []
    # Paths it must not see besides the bot's own secret files (which are always hidden).
    sandbox_hide: list[str] = []
    # Whether the fixer runs on a PR from a fork, and pushes there where its author lets
    # maintainers edit it; off, such a PR is reviewed and escalated, never fixed here.
    allow_forks: bool = False
    # Text added at the end of every fixer prompt (a repository's `.github/convergebot.toml`
    # may set its own: its conventions, how to run its tests).
    prompt_append: str = Field("", max_length=4000)


class Config(_Section):
    database: DatabaseConfig = DatabaseConfig()
    logging: LoggingConfig = LoggingConfig()
    jobs: JobsConfig = JobsConfig()
    github: GitHubConfig = GitHubConfig()
    server: ServerConfig = ServerConfig()
    webhooks: WebhooksConfig = WebhooksConfig()
    poller: PollerConfig = PollerConfig()
    scan: ScanConfig = ScanConfig()
    convergence: ConvergenceConfig = ConvergenceConfig()
    fixer: FixerConfig = FixerConfig()
    merge: MergeConfig = MergeConfig()
    budget: BudgetConfig = BudgetConfig()
    dashboard: DashboardConfig = DashboardConfig()
    retention: RetentionConfig = RetentionConfig()
    _source: Path | None = PrivateAttr(None)  # the file it was read from

    def secret_files(self) -> tuple[Path, ...]:
        """The bot's files an agent must never read: the config file itself, every `*_file`
        secret, the App's private key and the SQLite database (with its journal files)."""
        paths = [self._source] if self._source else []
        paths += [Path(path) for _, _, _, path in _file_keys(self)]
        if self.github.private_key_path:
            paths.append(Path(self.github.private_key_path))
        database = _sqlite_file(self.database.url)
        if database:
            paths += [database, *(database.with_name(database.name + s) for s in _SQLITE_SIDES)]
        return tuple(p.expanduser().absolute() for p in paths)


_SQLITE_SIDES = ("-wal", "-shm", "-journal")


def _sqlite_file(url: str) -> Path | None:
    scheme, sep, rest = url.partition(":///")
    if not sep or not scheme.startswith("sqlite"):
        return None
    name = rest.split("?", 1)[0]
    return Path(name) if name and name != ":memory:" else None


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (list, tuple)


def _table(name: str, raw: str) -> dict[str, Any]:
    """A table from the environment: a JSON object, or `key=value` pairs split by commas
    (`acme=123,acme/widgets=456`)."""
    if raw.lstrip().startswith("{"):
        try:
            found = json.loads(raw)
        except ValueError as e:
            raise ConfigError(f"config: {name}: not a JSON object: {e}") from None
        if not isinstance(found, dict):
            raise ConfigError(f"config: {name}: not a JSON object")
        return found
    table: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"config: {name}: {part!r} is not key=value")
        table[key.strip()] = value.strip()
    return table


def _env_overrides(env: typing.Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Map CONVERGEBOT_<SECTION>_<KEY> variables onto sections; also say where each came from."""
    overrides: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    for section, field in Config.model_fields.items():
        prefix = f"{ENV_PREFIX}{section.upper()}_"
        section_model = field.annotation
        if not (isinstance(section_model, type) and issubclass(section_model, BaseModel)):
            raise TypeError(f"Config.{section} is not a section: {section_model!r}")  # every field is one
        for name, raw in env.items():
            if not name.startswith(prefix):
                continue
            key = name[len(prefix):].lower()
            if key not in section_model.model_fields:
                raise ConfigError(f"config: {name} names no key: [{section}] has no {key!r}")
            value: Any = raw
            if _is_list(section_model.model_fields[key].annotation):
                value = json.loads(raw) if raw.lstrip().startswith("[") else [
                    part.strip() for part in raw.split(",") if part.strip()
                ]
            elif typing.get_origin(section_model.model_fields[key].annotation) is dict:
                value = _table(name, raw)
            overrides.setdefault(section, {})[key] = value
            origin[f"{section}.{key}"] = name
    return overrides, origin


def load_config(path: str | Path | None = None, env: typing.Mapping[str, str] | None = None) -> Config:
    """Load and validate; raise ConfigError naming the key on anything invalid.

    The file is `path`, else $CONVERGEBOT_CONFIG, else ./convergebot.toml if present; with no
    file the defaults apply (SQLite next to the working directory).
    """
    env = os.environ if env is None else env
    explicit = path or env.get(CONFIG_PATH_ENV)
    file = Path(explicit) if explicit else Path(DEFAULT_CONFIG_FILE)
    data: dict[str, Any] = {}
    source = file if explicit or file.exists() else None
    if source:
        try:
            data = tomllib.loads(file.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config: file not found: {file}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config: {file}: invalid TOML: {e}") from None
    try:
        overrides, origin = _env_overrides(env)
    except json.JSONDecodeError as e:
        raise ConfigError(f"config: a list value in the environment is invalid JSON: {e}") from None
    for section, values in overrides.items():
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(f"config: [{section}] must be a table")
        data.setdefault(section, {}).update(values)
    try:
        config = Config.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        # A table's entry (`webhooks.hooks.acme`) came from where its key did.
        named = next((origin[k] for k in (".".join(str(p) for p in first["loc"][:n])
                                          for n in range(len(first["loc"]), 1, -1)) if k in origin), None)
        where = f" (from {named})" if named else f" (in {file})" if data else ""
        raise ConfigError(f"config: {key}: {first['msg']}{where}") from None
    config = _read_secret_files(config)
    config._source = source.absolute() if source else None
    return config


def _read_secret_files(config: Config) -> Config:
    """Fill each secret from its `<key>_file`, so the secret need be in no environment at all.

    The file's content without surrounding whitespace is the value; giving both is an error.
    """
    updates: dict[str, dict[str, Any]] = {}
    for section, values, name, path in _file_keys(config):
        key = name.removesuffix(FILE_SUFFIX)
        if key not in type(values).model_fields:
            continue
        given = getattr(values, key)
        secret_field = isinstance(given, SecretStr)
        if given.get_secret_value() if secret_field else given != _default(values, key):
            raise ConfigError(f"config: {section}.{key} and {section}.{name} are both set: give one")
        try:
            secret = Path(path).expanduser().read_text().strip()
        except OSError as e:
            raise ConfigError(f"config: {section}.{name}: cannot read {path}: "
                              f"{e.strerror or type(e).__name__}") from None
        if not secret:
            raise ConfigError(f"config: {section}.{name}: {path} is empty")
        updates.setdefault(section, {})[key] = SecretStr(secret) if secret_field else secret
    sections = {name: getattr(config, name).model_copy(update=update) for name, update in updates.items()}
    return config.model_copy(update=sections) if sections else config


def _file_keys(config: Config) -> Iterator[tuple[str, BaseModel, str, str]]:
    """Each `<key>_file` that is set, in every section: (section, its values, the field, the path)."""
    for section in type(config).model_fields:
        values = getattr(config, section)
        for name in type(values).model_fields:
            if name.endswith(FILE_SUFFIX) and getattr(values, name):
                yield section, values, name, getattr(values, name)


def _default(values: BaseModel, key: str) -> Any:
    return type(values).model_fields[key].default
