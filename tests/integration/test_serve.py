"""`convergebot serve` as a real process: start, answer, stop on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from bot.config import ConfigError
from storage import jobs
from storage.database import Database
from storage.migrate import migrate
from tests.serving import make_config, serving

from .test_cli import cli_env, convergebot


def _wait_for_port(proc: subprocess.Popen, timeout: float = 30, *, with_frozen: bool = False):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited early with {proc.returncode}")
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if event.get("event") == "server.listening":
            return (event["port"], event["frozen_objects"]) if with_frozen else event["port"]
    raise AssertionError("serve did not start listening")


async def _jobs(db_url: str):
    db = Database(db_url)
    try:
        return await jobs.list_jobs(db)
    finally:
        await db.dispose()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_exit_0_quickly_and_hand_back_the_running_job(db_url, sig):
    # A "GitHub" that accepts connections and never answers: the sync job hangs mid-request.
    black_hole = socket.socket()
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(16)
    try:
        assert convergebot(db_url, "submit", "octo/repo#1").returncode == 0
        env = cli_env(db_url) | {
            "CONVERGEBOT_SERVER_PORT": "0",
            "CONVERGEBOT_GITHUB_API_URL": f"http://127.0.0.1:{black_hole.getsockname()[1]}/",
            "CONVERGEBOT_GITHUB_TOKEN": "t",
            "CONVERGEBOT_GITHUB_WEBHOOK_SECRET": "s",
            "CONVERGEBOT_GITHUB_READ_TIMEOUT_SECONDS": "120",
            "CONVERGEBOT_SERVER_SHUTDOWN_GRACE_SECONDS": "1",
        }
        proc = subprocess.Popen([sys.executable, "-m", "bot", "serve"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            port, frozen = _wait_for_port(proc, with_frozen=True)
            assert httpx.get(f"http://127.0.0.1:{port}/livez").status_code == 200
            # What start-up made is frozen out of the full collections (they held the loop 75-160 ms).
            assert frozen > 10_000, frozen
            deadline = time.monotonic() + 30  # the first poll queues a sync, a worker claims it and hangs
            while not any(j.status == "running" for j in asyncio.run(_jobs(db_url))) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert [j.status for j in asyncio.run(_jobs(db_url))] == ["running"]

            started = time.monotonic()
            proc.send_signal(sig)
            assert proc.wait(timeout=10) == 0
            assert time.monotonic() - started < 10
            said = [json.loads(line) for line in proc.stderr if '"server.stopping"' in line]
            assert [(e["reason"], e["signal"]) for e in said] == [("signal", sig.name)]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        (job,) = asyncio.run(_jobs(db_url))
        assert (job.status, job.lease_owner, job.attempts) == ("queued", None, 0)
    finally:
        black_hole.close()


def test_serve_refuses_invalid_config_with_the_key_named(tmp_path):
    env = cli_env(f"sqlite:///{tmp_path / 'x.db'}") | {"CONVERGEBOT_SERVER_PORT": "99999"}
    p = subprocess.run([sys.executable, "-m", "bot", "serve"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "server.port" in p.stderr


def test_serve_refuses_the_fake_fixer(tmp_path):
    env = cli_env(f"sqlite:///{tmp_path / 'x.db'}") | {"CONVERGEBOT_FIXER_KIND": "fake"}
    p = subprocess.run([sys.executable, "-m", "bot", "serve"], env=env, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and "fake" in p.stderr and "refuses" in p.stderr
    assert not (tmp_path / "x.db").exists()


async def test_doctor_checks_database_github_and_fixer(tmp_path, simulator):
    import asyncio

    env = cli_env(f"sqlite:///{tmp_path / 'd.db'}") | {
        "CONVERGEBOT_GITHUB_API_URL": simulator.url, "CONVERGEBOT_GITHUB_TOKEN": "t",
        "CONVERGEBOT_GITHUB_WEBHOOK_SECRET": "s", "CONVERGEBOT_FIXER_KIND": "author",
    }

    async def doctor(**extra):
        p = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot", "doctor", env=env | extra,
                                                 stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(p.communicate(), 60)
        return p.returncode, out.decode()

    code, out = await doctor()
    assert code == 1 and "[FAIL] database sqlite" in out and "convergebot migrate" in out
    assert "[ok  ] GitHub API at" in out and "rate limit" in out
    assert convergebot(env["CONVERGEBOT_DATABASE_URL"], "migrate").returncode == 0
    code, out = await doctor()
    assert code == 0 and out.strip().endswith("all checks passed"), out
    code, out = await doctor(CONVERGEBOT_GITHUB_API_URL="http://127.0.0.1:9/",
                             CONVERGEBOT_FIXER_KIND="command", CONVERGEBOT_FIXER_COMMAND="no-such-agent")
    assert code == 1 and "[FAIL] GitHub API at http://127.0.0.1:9/" in out and "[FAIL] fixer command" in out


async def test_a_second_serve_on_one_sqlite_file_is_refused_and_the_first_goes_on(tmp_path):
    url = f"sqlite:///{tmp_path / 'one.db'}"
    db = Database(url)
    await migrate(db)
    await db.dispose()
    config = make_config(url)
    async with serving(config) as (_rt, http):
        with pytest.raises(ConfigError, match="another `convergebot serve` is running on .*one.db"):
            async with serving(config):
                pass
        assert (await http.get("/livez")).status_code == 200
    async with serving(config) as (_rt, http):  # the first one gone, a new one starts
        assert (await http.get("/livez")).status_code == 200


async def test_the_server_s_connections_send_without_delay(tmp_path):
    """Each accepted connection has TCP_NODELAY: a response's body, written after its head,
    goes out at once instead of waiting for the client's delayed ACK (~45 ms a request on a
    keep-alive connection)."""
    import gc

    from bot.surfaces.serve import running

    config = make_config(f"sqlite:///{tmp_path / 'bot.db'}")
    frozen = gc.get_freeze_count()
    async with running(config) as (_, server):
        assert gc.get_freeze_count() == frozen  # only `serve` freezes: a test's stacks must be collected
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            assert (await http.get("/livez")).status_code == 200
            connections = list(server.server_state.connections)
            assert connections
            for protocol in connections:
                sock = protocol.transport.get_extra_info("socket")
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
