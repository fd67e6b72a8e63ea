"""The CLI's answers to an operator's mistakes: one line on stderr, a non-zero exit, nothing
created. Each runs the real command as a process, as README's CLI section describes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sqlite3
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from storage.migrate import head_revision
from tests.simulator_fixtures import sim, simulator  # noqa: F401

from ..conftest import BACKENDS, _asyncpg_dsn
from .test_cli import cli_env

REPO = "acme/widgets"


async def convergebot(*args: str, env: dict, cwd: Path | None = None) -> tuple[int, str, str]:
    p = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(), 60)
    return p.returncode, out.decode(), err.decode()


def no_config_env() -> dict:
    """The environment of an operator with no config file and no CONVERGEBOT_* settings; the
    project's root stays importable from another working directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_an_unsupported_database_url_is_one_line(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[database]\nurl = "mysql://bot@db.example/convergebot"\n')
    code, _, err = await convergebot("status", "--config", str(config), env=no_config_env())
    assert code == 2
    assert one_line(err) == ("convergebot: error: database.url: unsupported backend 'mysql' "
                             "(use sqlite or postgresql)")


PASSWORD = "hunter2"


@pytest.fixture
def password_role(request) -> str:
    """A role of the test's PostgreSQL that must give its password (`scram-sha-256`, from a line
    put first in the server's pg_hba.conf while the test runs): its URL, with a wrong password."""
    admin = request.getfixturevalue("pg_admin_url")
    role = f"pw_{uuid.uuid4().hex[:12]}"
    line = f"host all {role} 127.0.0.1/32 scram-sha-256\n"

    async def setup() -> Path:
        conn = await asyncpg.connect(_asyncpg_dsn(admin))
        try:
            await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'the-right-one'")
            hba = Path(await conn.fetchval("SHOW hba_file"))
            try:
                hba.write_text(line + hba.read_text())
            except OSError:
                pytest.skip("the test server's pg_hba.conf is not ours to change")
            await conn.execute("SELECT pg_reload_conf()")
            return hba
        finally:
            await conn.close()

    async def teardown(hba: Path) -> None:
        hba.write_text(hba.read_text().replace(line, ""))
        conn = await asyncpg.connect(_asyncpg_dsn(admin))
        try:
            await conn.execute("SELECT pg_reload_conf()")
            await conn.execute(f"DROP ROLE IF EXISTS {role}")
        finally:
            await conn.close()

    hba = asyncio.run(setup())
    request.addfinalizer(lambda: asyncio.run(teardown(hba)))
    return make_url(admin).set(username=role, password=PASSWORD).render_as_string(hide_password=False)


def _mistaken_url(request, mistake: str) -> str:
    if mistake == "refusing port":
        return f"postgresql://bot:{PASSWORD}@127.0.0.1:{closed_port()}/convergebot"
    if mistake == "unresolvable host":
        return f"postgresql://bot:{PASSWORD}@no-such-host.invalid/convergebot"  # .invalid never resolves
    if "postgres" not in BACKENDS:
        pytest.skip("PostgreSQL is not among the test backends")
    if mistake == "missing database":
        admin = make_url(request.getfixturevalue("pg_admin_url"))
        return admin.set(password=PASSWORD, database="no_such_database").render_as_string(hide_password=False)
    return request.getfixturevalue("password_role")


@pytest.mark.parametrize("command", ["serve", "status", "migrate", "submit"])
@pytest.mark.parametrize(("mistake", "says"), [
    ("refusing port", "Connect call failed"),
    ("unresolvable host", ""),
    ("missing database", 'database "no_such_database" does not exist'),
    ("wrong password", "password authentication failed for user"),
])
def test_a_postgresql_it_cannot_use_is_one_line_naming_it_without_its_password(
        request, tmp_path, command, mistake, says):
    # Not a coroutine: the wrong password's fixture changes the server's configuration with a loop of its own.
    url = _mistaken_url(request, mistake)
    env = cli_env(url) | {"CONVERGEBOT_SERVER_PORT": "0", "CONVERGEBOT_GITHUB_WEBHOOK_SECRET": "s"}
    code, out, err = asyncio.run(convergebot(command, *(["acme/widgets#7"] if command == "submit" else []),
                                             env=env, cwd=tmp_path))
    assert code == 1 and out == ""
    # `submit` first says it could not ask GitHub (cli_env names none), then the database's line.
    line = one_line("\n".join(x for x in err.splitlines() if not x.startswith("convergebot: could not check")))
    host = make_url(url).host
    assert line.startswith(f"convergebot: error: database postgresql+asyncpg://{make_url(url).username}:***@{host}")
    assert ": cannot connect: " in line and says in line, line
    assert PASSWORD not in err


async def test_serve_on_a_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = cli_env(f"sqlite:///{tmp_path / 'x.db'}") | {
            "CONVERGEBOT_SERVER_HOST": "127.0.0.1", "CONVERGEBOT_SERVER_PORT": str(port),
            "CONVERGEBOT_GITHUB_WEBHOOK_SECRET": "s", "CONVERGEBOT_FIXER_KIND": "author",
        }
        code, _, err = await convergebot("serve", env=env)
    assert code == 2
    assert one_line(err) == (f"convergebot: error: server: cannot listen on 127.0.0.1:{port} "
                             "(server.host, server.port): Address already in use")
    assert not (tmp_path / "x.db").exists(), "the port is checked before the database is opened"


@pytest.mark.parametrize(("content", "says"), [
    (None, "config: file not found: "),
    ("[jobs\nworkers = 2\n", "invalid TOML"),
    ("[jobs]\nworkers = 'lots'\n", "config: jobs.workers: "),
    ("[jobs]\nworkerz = 2\n", "config: jobs.workerz: "),
], ids=["missing", "unparsable", "invalid", "unknown-key"])
async def test_a_bad_config_file_is_one_line(tmp_path, content, says):
    config = tmp_path / "c.toml"
    if content is not None:
        config.write_text(content)
    code, _, err = await convergebot("status", "--config", str(config), env=no_config_env(),
                                     cwd=tmp_path)
    assert code == 2
    line = one_line(err)
    assert line.startswith("convergebot: error: ") and says in line
    assert sorted(p.name for p in tmp_path.iterdir()) == (["c.toml"] if content else [])


@pytest.mark.parametrize("command", ["serve", "migrate", "submit"])
async def test_a_sqlite_path_whose_directory_does_not_exist_is_one_line_and_creates_nothing(tmp_path, command):
    missing = tmp_path / "mistyped" / "convergebot.db"
    env = cli_env(f"sqlite:///{missing}") | {"CONVERGEBOT_SERVER_PORT": "0", "CONVERGEBOT_GITHUB_WEBHOOK_SECRET": "s"}
    code, out, err = await convergebot(command, *(["acme/widgets#7"] if command == "submit" else []),
                                       env=env, cwd=tmp_path)
    assert (code, out) == (1, "")
    said = [x for x in err.splitlines() if not x.startswith("convergebot: could not check")]
    assert one_line("\n".join(said)) == (f"convergebot: error: database {missing}: directory {missing.parent} "
                                         "does not exist (create it, or correct database.url)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["serve", "submit"])
async def test_an_app_private_key_that_cannot_be_read_is_one_line(tmp_path, sqlite_db_url, command):
    # serve finds it once the database is migrated: the process must still end (it hung, its
    # SQLite engine left open) and say it in one line.
    missing = tmp_path / "app.pem"
    env = cli_env(sqlite_db_url) | {"CONVERGEBOT_SERVER_PORT": "0", "CONVERGEBOT_GITHUB_WEBHOOK_SECRET": "s",
                                    "CONVERGEBOT_GITHUB_APP_ID": "1", "CONVERGEBOT_GITHUB_PRIVATE_KEY_PATH": str(missing)}
    code, out, err = await convergebot(command, *(["acme/widgets#7"] if command == "submit" else []), env=env)
    assert (code, out) == (2, "")
    assert one_line(err) == (f"convergebot: error: config: github.private_key_path: cannot read {missing}: "
                             "No such file or directory")


async def test_status_on_a_database_that_does_not_exist_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere" / "convergebot.db"
    code, out, err = await convergebot("status", env=cli_env(f"sqlite:///{missing}"))
    assert (code, out) == (1, "")
    assert one_line(err) == (f"convergebot: error: database {missing} does not exist: "
                             "create it with `convergebot migrate`")
    assert not (tmp_path / "nowhere").exists()


async def test_status_with_no_config_names_the_default_database_and_creates_none(tmp_path):
    code, _, err = await convergebot("status", env=no_config_env(), cwd=tmp_path)
    assert code == 1
    assert one_line(err) == (f"convergebot: error: database {tmp_path / 'convergebot.db'} does not "
                             "exist: create it with `convergebot migrate`")
    assert list(tmp_path.iterdir()) == []


async def test_status_on_a_database_without_the_schema_does_not_migrate_it(tmp_path):
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    code, _, err = await convergebot("status", env=cli_env(f"sqlite:///{empty}"))
    assert code == 1
    assert one_line(err) == (f"convergebot: error: database {empty} has no schema, newest is "
                             f"{head_revision()}: run `convergebot migrate`")
    with contextlib.closing(sqlite3.connect(empty)) as conn:
        assert conn.execute("SELECT name FROM sqlite_master").fetchall() == []


async def test_doctor_on_a_database_that_does_not_exist_says_so_and_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere" / "convergebot.db"
    env = cli_env(f"sqlite:///{missing}") | {"CONVERGEBOT_GITHUB_API_URL": f"http://127.0.0.1:{closed_port()}/"}
    code, out, _ = await convergebot("doctor", env=env)
    assert code == 1
    assert (f"[FAIL] database sqlite: database {missing} does not exist: "
            "create it with `convergebot migrate`") in out.splitlines()
    assert not (tmp_path / "nowhere").exists()


async def test_config_is_accepted_after_the_command_as_well_as_before(tmp_path, sqlite_db_url):
    config = tmp_path / "c.toml"
    config.write_text(f'[database]\nurl = "{sqlite_db_url}"\n')
    for args in (["--config", str(config), "status"], ["status", "--config", str(config)]):
        code, out, err = await convergebot(*args, env=no_config_env(), cwd=tmp_path)
        assert (code, out, err) == (0, "no PRs enrolled\n", ""), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "convergebot.db"]


async def test_submit_of_a_pr_github_does_not_have_is_refused(sim, simulator, sqlite_db_url):  # noqa: F811
    await sim.create_repo(REPO, files={"app.py": "one\n"})
    pr = await sim.open_pr(REPO, title="Change", head="feat", author="dev", files={"app.py": "two\n"})
    env = cli_env(sqlite_db_url) | {"CONVERGEBOT_GITHUB_API_URL": simulator.url,
                                    "CONVERGEBOT_GITHUB_TOKEN": "t"}
    missing = f"{REPO}#{pr.number + 1}"
    code, out, err = await convergebot("submit", missing, env=env)
    assert (code, out) == (1, "")
    assert one_line(err) == (f"convergebot: error: {missing}: GitHub at {simulator.url} has no such "
                             "pull request (or the credentials cannot see it)")
    code, _, _ = await convergebot("status", missing, env=env)
    assert code == 1, "nothing was enrolled"

    code, out, err = await convergebot("submit", f"{REPO}#{pr.number}", env=env)
    assert code == 0 and out.startswith(f"started {REPO}#{pr.number} ")
    assert "HTTP Request" not in err and "convergebot:" not in err


async def test_submit_reads_a_config_file_not_base64_as_unreadable_in_one_line(sim, simulator, sqlite_db_url):  # noqa: F811
    """GitHub's answer for `.github/convergebot.toml` has content that is not base64: the
    global settings apply, said in one line, and the PR is enrolled."""
    await sim.create_repo(REPO, files={"app.py": "one\n", ".github/convergebot.toml": "[convergence]\nmax_rounds = 4\n"})
    pr = await sim.open_pr(REPO, title="Change", head="feat", author="dev", files={"app.py": "two\n"})
    fault = sim.inject_fault(r"/contents/", method="GET", rewrite="bad_base64")
    env = cli_env(sqlite_db_url) | {"CONVERGEBOT_GITHUB_API_URL": simulator.url,
                                    "CONVERGEBOT_GITHUB_TOKEN": "t"}
    code, out, err = await convergebot("submit", f"{REPO}#{pr.number}", env=env)
    assert code == 0 and out.startswith(f"started {REPO}#{pr.number} "), err
    assert fault.hits == 1 and "Traceback" not in err
    said = [line for line in err.splitlines() if line.startswith("convergebot:")]
    assert said == [f"convergebot: could not read .github/convergebot.toml of {REPO} (GET /repos/{REPO}/contents/"
                    ".github/convergebot.toml: malformed answer (content is not base64)); the global settings apply"]
    (logged,) = [json.loads(line) for line in err.splitlines() if '"github.malformed"' in line]
    assert logged["request"] == f"GET /repos/{REPO}/contents/.github/convergebot.toml" and logged["status"] == 200
    code, out, _ = await convergebot("status", f"{REPO}#{pr.number}", "--json", env=env)
    assert code == 0 and json.loads(out)["max_rounds"] == 8  # the global one, not the file's 4


async def test_submit_when_github_cannot_be_reached_says_so_and_enrolls(sqlite_db_url):
    env = cli_env(sqlite_db_url) | {"CONVERGEBOT_GITHUB_API_URL": f"http://127.0.0.1:{closed_port()}/"}
    code, out, err = await convergebot("submit", f"{REPO}#7", env=env)
    assert code == 0 and out.startswith(f"started {REPO}#7 ")
    said = [line for line in err.splitlines() if line.startswith("convergebot:")]
    assert len(said) == 1 and said[0].startswith(f"convergebot: could not check {REPO}#7 on GitHub")
    assert "Traceback" not in err


async def test_doctor_does_not_print_library_http_lines(simulator, sqlite_db_url):  # noqa: F811
    env = cli_env(sqlite_db_url) | {"CONVERGEBOT_GITHUB_API_URL": simulator.url,
                                    "CONVERGEBOT_GITHUB_TOKEN": "t"}
    _, out, err = await convergebot("doctor", env=env)
    assert "[ok  ] GitHub API at" in out
    assert "HTTP Request" not in out + err
