"""The `command` fixer's sandbox: an agent run by the bot cannot reach the bot's secrets.

The agent looks for them where it could find them unsandboxed: its parent's environment
(`/proc/$PPID/environ`), the bot process's (`/proc/<bot pid>/environ`, every other environ it
can read, its own), the config file, the token file. Each test also runs the same agent with
`fixer.sandbox = "off"`, where it does find them, so a probe that sees nothing proves nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bot.config import ConfigError, load_config
from bot.fixers.command import CommandFixer
from bot.fixers.sandbox import probe, sandbox_for
from bot.surfaces.serve import build_fixer

from .test_fixer_support import BRANCH, Remote, git, make_remote, make_request

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghs_sandboxTestToken0123456789"
WEBHOOK_SECRET = "webhook-secret-sandbox-test"
API_TOKEN = "api-token-sandbox-test"
SECRETS = (TOKEN, WEBHOOK_SECRET, API_TOKEN)


def _bwrap_missing() -> str | None:
    program = shutil.which("bwrap")
    if program is None:
        return "bubblewrap is not installed (Debian package bubblewrap)"
    return probe(program)


needs_bwrap = pytest.mark.skipif(_bwrap_missing() is not None, reason=str(_bwrap_missing()))

# Looks everywhere the issue found the bot's secrets, writes what it saw to argv[2], commits a
# change in its clone and answers.
AGENT = textwrap.dedent('''
    import glob, json, os, pathlib, subprocess, sys
    botdir, report = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

    def read(path):
        try:
            return pathlib.Path(path).read_bytes().decode("utf-8", "replace")
        except OSError as e:
            return "<%s>" % type(e).__name__

    bot_pid = int(read(botdir / "bot.pid"))
    seen = {
        "env": dict(os.environ),
        "env_token": os.environ.get("CONVERGEBOT_GITHUB_TOKEN"),
        "ppid_environ": read("/proc/%d/environ" % os.getppid()),
        "bot_environ": read("/proc/%d/environ" % bot_pid),
        "environs": {p: read(p) for p in glob.glob("/proc/[0-9]*/environ")},
        "config": read(botdir / "convergebot.toml"),
        "token_file": read(botdir / "token"),
        "notes": read(botdir / "notes.txt"),
    }
    try:
        os.kill(bot_pid, 0)
        seen["signals_bot"] = True
    except OSError:
        seen["signals_bot"] = False
    try:
        (botdir / "agent-was-here").write_text("x")
        seen["wrote_botdir"] = True
    except OSError:
        seen["wrote_botdir"] = False
    pathlib.Path("AGENT.md").write_text("fixed in the sandbox\\n")
    subprocess.run(["git", "add", "AGENT.md"], check=True)
    subprocess.run(["git", "commit", "-qm", "agent change"], check=True)
    report.write_text(json.dumps(seen))
    print(json.dumps({"status": "addressed", "summary": "looked around"}))
''')


@pytest.fixture
def remote(tmp_path) -> Remote:
    return make_remote(tmp_path / "remote")


@pytest.fixture
def botdir():
    """The bot's working directory, outside /tmp (which the sandbox replaces with its own), so
    the agent could see it but for the sandbox."""
    with tempfile.TemporaryDirectory(dir=Path.home(), prefix=".convergebot-sandbox-test-") as d:
        yield Path(d)


def _run_bot(botdir: Path, remote: Remote, sandbox: str, token_in: str) -> tuple[dict, dict]:
    """Run the stand-in bot in `botdir` once; (its verdict, what its agent saw)."""
    out = botdir / "out"
    out.mkdir()
    report = out / "report.json"
    (botdir / "agent.py").write_text(AGENT)
    (botdir / "notes.txt").write_text("not a secret\n")
    if token_in == "file":
        (botdir / "token").write_text(TOKEN + "\n")
    command = [sys.executable, str(botdir / "agent.py"), str(botdir), str(report)]
    token_line = 'token_file = "token"' if token_in == "file" else ""
    (botdir / "convergebot.toml").write_text(textwrap.dedent(f"""
        [github]
        webhook_secret = "{WEBHOOK_SECRET}"
        {token_line}
        [server]
        api_token = "{API_TOKEN}"
        [fixer]
        kind = "command"
        command = {json.dumps(command)}
        timeout_seconds = 60
        sandbox = "{sandbox}"
        sandbox_write = [{json.dumps(str(out))}]
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    env["PYTHONPATH"] = str(ROOT)
    if token_in == "env":
        env["CONVERGEBOT_GITHUB_TOKEN"] = TOKEN
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.fixer_bot", remote.url, BRANCH, remote.entry_head],
        cwd=botdir, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert report.exists(), f"the agent wrote no report: {verdict} {done.stderr[-2000:]}"
    return verdict, json.loads(report.read_text())


@needs_bwrap
@pytest.mark.parametrize("token_in", ["env", "file"])
def test_a_sandboxed_agent_finds_neither_the_bots_environment_nor_its_secret_files(
    botdir, remote, token_in
):
    verdict, seen = _run_bot(botdir, remote, "bwrap", token_in)

    everything = json.dumps(seen)
    assert not [s for s in SECRETS if s in everything]
    assert seen["env_token"] is None
    assert seen["bot_environ"] == "<FileNotFoundError>"  # another PID namespace
    assert seen["signals_bot"] is False
    hidden = ("", "<PermissionError>")  # masked; with token_in="env" there is no token file
    assert seen["config"] in hidden
    assert seen["token_file"] in (hidden if token_in == "file" else ("<FileNotFoundError>",))
    # The bot's directory itself is visible, read-only: only its secrets are hidden.
    assert seen["notes"] == "not a secret\n"
    assert seen["wrote_botdir"] is False and not (botdir / "agent-was-here").exists()
    # And the agent still did its work: its commit is on the branch.
    assert verdict["finished"] and verdict["pushed_head"] == remote.head()
    assert remote.show(remote.head(), "AGENT.md") == "fixed in the sandbox"


def test_unsandboxed_the_same_agent_finds_them(botdir, remote):
    verdict, seen = _run_bot(botdir, remote, "off", "env")

    assert TOKEN in seen["ppid_environ"] and TOKEN in seen["bot_environ"]
    assert WEBHOOK_SECRET in seen["config"] and API_TOKEN in seen["config"]
    assert seen["signals_bot"] is True
    assert seen["env_token"] is None  # the environment built for it never had the token
    assert verdict["pushed_head"] == remote.head()


DAEMON = textwrap.dedent('''
    import json, subprocess, sys
    # A new session: out of the process group the bot kills at the end of a run.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", sys.argv[1]],
                     start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(json.dumps({"status": "addressed"}))
''')


def _marked(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_text():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _none_left(marker: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while _marked(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=needs_bwrap), "off"])
async def test_a_daemon_the_agent_left_behind_ends_with_the_sandbox(tmp_path, remote, mode):
    script = tmp_path / "daemon_agent.py"
    script.write_text(DAEMON)
    marker = f"convergebot-daemon-{uuid.uuid4().hex}"
    fixer = CommandFixer([sys.executable, str(script), marker], 30, workdir_root=tmp_path / "work",
                         sandbox=sandbox_for(mode))
    try:
        verdict = await fixer.run(make_request(remote))
        assert verdict.finished
        if mode == "bwrap":
            assert _none_left(marker)
        else:  # it left the process group, so only a PID namespace of its own ends it
            assert _marked(marker)
    finally:
        for pid in _marked(marker):
            os.kill(pid, 9)


@needs_bwrap
async def test_the_agent_writes_only_its_clone_and_sees_no_other_workspace(tmp_path, remote):
    other = tmp_path / "work" / "convergebot-fix-other"
    other.mkdir(parents=True)
    (other / "prompt.md").write_text("another PR's prompt")
    script = tmp_path / "writer_agent.py"
    script.write_text(textwrap.dedent(f'''
        import json, os, pathlib
        def attempt(path):
            try:
                pathlib.Path(path).write_text("x")
                return "written"
            except OSError as e:
                return type(e).__name__
        print(json.dumps({{"status": "addressed", "summary": json.dumps({{
            "other_workspace": os.path.exists({str(other)!r}),
            "tmp": attempt("/tmp/scratch"),
            "outside": attempt({str(tmp_path / "outside.txt")!r}),
            "clone": attempt("written-by-agent.txt"),
        }})}}))
    '''))
    fixer = CommandFixer([sys.executable, str(script)], 30, workdir_root=tmp_path / "work",
                         sandbox=sandbox_for("bwrap"))
    verdict = await fixer.run(make_request(remote))

    seen = json.loads(verdict.summary)
    assert seen["other_workspace"] is False
    assert seen["tmp"] == "written" and seen["outside"] == "written"  # its private /tmp...
    assert not (tmp_path / "outside.txt").exists()  # ...which is not the machine's
    assert seen["clone"] == "written"
    assert git("show", f"{verdict.pushed_head}:written-by-agent.txt", cwd=remote.bare) == "x"


def test_auto_without_bubblewrap_runs_unsandboxed_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with capture_logs() as logs:
        assert sandbox_for("auto") is None
    (warning,) = [e for e in logs if e["event"] == "fixer.unsandboxed"]
    assert warning["log_level"] == "warning" and "bubblewrap" in warning["reason"]
    assert "GitHub token" in warning["risk"]


def test_a_required_sandbox_that_cannot_run_stops_serve_at_start(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    config = load_config(env={"CONVERGEBOT_FIXER_KIND": "command", "CONVERGEBOT_FIXER_COMMAND": "agent",
                              "CONVERGEBOT_FIXER_SANDBOX": "bwrap",
                              "CONVERGEBOT_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"})
    with pytest.raises(ConfigError, match='fixer.sandbox = "bwrap": bwrap is not installed'):
        build_fixer(config)


@needs_bwrap
def test_serve_builds_a_sandboxed_command_fixer_that_hides_the_config_it_was_read_from(tmp_path):
    f = tmp_path / "convergebot.toml"
    f.write_text('[fixer]\nkind = "command"\ncommand = ["agent"]\nsandbox_hide = ["~/notes"]\n')
    fixer = build_fixer(load_config(f, env={}))
    assert fixer.sandbox is not None
    assert f in fixer.sandbox.hide and Path("~/notes").expanduser() in fixer.sandbox.hide


@needs_bwrap
def test_a_missing_writable_path_is_created_for_the_bot_s_user_alone(tmp_path):
    # bubblewrap binds only what exists: a state directory skipped would fail the agent's first
    # write. Created at start, readable by the bot's user alone; the doctor creates nothing.
    missing = tmp_path / "home" / ".tool"
    assert sandbox_for("bwrap", write=[missing], create=False) is not None and not missing.exists()
    sandbox = sandbox_for("bwrap", write=[missing])
    assert missing.is_dir() and (missing.stat().st_mode & 0o777) == 0o700
    assert missing in sandbox.write
