"""`convergebot serve` refuses to start without a webhook secret, unless told it is meant."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from .test_cli import cli_env


def _serve(env: dict, *flags: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bot", "serve", *flags], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _events_until_listening(proc: subprocess.Popen, timeout: float = 30) -> list[dict]:
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited with {proc.returncode}: {events}")
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
        if events[-1].get("event") == "server.listening":
            return events
    raise AssertionError("serve did not start listening")


def _env(tmp_path, **extra: str) -> dict:
    return cli_env(f"sqlite:///{tmp_path / 'x.db'}") | {
        "CONVERGEBOT_SERVER_PORT": "0", "CONVERGEBOT_GITHUB_API_URL": "http://127.0.0.1:9/",
        "CONVERGEBOT_GITHUB_TOKEN": "t", "CONVERGEBOT_FIXER_KIND": "author", **extra,
    }


def test_serve_without_a_webhook_secret_refuses_to_start(tmp_path):
    p = subprocess.run([sys.executable, "-m", "bot", "serve"], env=_env(tmp_path),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert "github.webhook_secret is not set" in p.stderr and "--insecure-no-webhook-secret" in p.stderr
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("how", ["flag", "file"])
def test_serve_starts_with_the_flag_warned_or_with_the_secret_from_a_file(tmp_path, how):
    secret = tmp_path / "webhook-secret"
    secret.write_text("s3cret\n")
    if how == "flag":
        proc = _serve(_env(tmp_path), "--insecure-no-webhook-secret")
    else:
        proc = _serve(_env(tmp_path, CONVERGEBOT_GITHUB_WEBHOOK_SECRET_FILE=str(secret)))
    try:
        events = _events_until_listening(proc)
        warned = [e for e in events if e.get("event") == "server.no_webhook_secret"]
        assert len(warned) == (1 if how == "flag" else 0)
        assert not warned or warned[0]["level"] == "warning"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
