"""The token authenticates git over HTTP, and shows up nowhere else.

A real smart-HTTP git server (`git http-backend` behind a tiny handler) accepts only
`Authorization: Basic base64(x-access-token:TOKEN)`, so a successful push proves the token
reached git; the fixer script then reports everything it could see.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import structlog

from bot.fixers.command import CommandFixer
from bot.fixers.scripted import ScriptedFixer

from .test_fixer_support import Remote, fixer_script, make_remote, make_request


@pytest.fixture
def remote(tmp_path) -> Remote:
    return make_remote(tmp_path / "remote")

TOKEN = "ghs_TopSecretInstallationToken0123456789"
BASIC = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()


class _GitHandler(BaseHTTPRequestHandler):
    project_root = ""

    def do_GET(self):
        self._serve()

    def do_POST(self):
        self._serve()

    def log_message(self, *args):
        pass

    def _serve(self):
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        if self.headers.get("Authorization") != f"Basic {BASIC}":
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        env = {
            "PATH": os.environ["PATH"],
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_PROJECT_ROOT": self.project_root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True,
                             timeout=30).stdout
        sep = b"\r\n\r\n" if b"\r\n\r\n" in out else b"\n\n"
        head, _, payload = out.partition(sep)
        status, headers = 200, []
        for line in head.decode().splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def http_url(remote):
    handler = type("Handler", (_GitHandler,), {"project_root": str(remote.bare.parent)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{remote.bare.name}", server
    finally:
        server.shutdown()
        server.server_close()


SPY = """
files = {str(p): p.read_bytes().decode("latin-1") for p in repo.parent.rglob("*")
         if p.is_file() and not p.is_symlink() and "objects" not in p.parts}
record(argv=sys.argv, env=dict(os.environ), files=files,
       git_config=(repo / ".git" / "config").read_text())
(repo / "README.md").write_text("fixed over http\\n")
verdict()
"""


async def test_the_token_authenticates_the_push_and_never_reaches_argv_env_files_or_logs(
    remote, http_url, tmp_path, monkeypatch, capfd
):
    url, server = http_url
    monkeypatch.setenv("CONVERGEBOT_GITHUB_TOKEN", TOKEN)  # as the bot itself is configured
    monkeypatch.setenv("SOME_TOOL_SETTING", "kept")
    argv, record = fixer_script(tmp_path, SPY)
    req = make_request(remote, clone_url=url, token=TOKEN)
    with structlog.testing.capture_logs() as logs:
        verdict = await CommandFixer(argv, 20, workdir_root=tmp_path / "work").run(req)

    # Authenticated over HTTP: clone and push both went through the token-checking server.
    assert verdict.pushed_head == remote.head() != remote.entry_head, verdict
    assert any("git-receive-pack" in p for p in server.requests)
    seen = json.loads(record.read_text())
    assert not any(TOKEN in a or BASIC in a for a in seen["argv"])
    leaked = {k for k, v in seen["env"].items() if TOKEN in v or BASIC in v}
    assert leaked == set()
    assert "CONVERGEBOT_GITHUB_TOKEN" not in seen["env"]
    assert not any(k.startswith("GIT_CONFIG_KEY") for k in seen["env"])
    assert seen["env"]["SOME_TOOL_SETTING"] == "kept"
    assert any(p.endswith("findings.json") for p in seen["files"])
    assert [p for p, text in seen["files"].items() if TOKEN in text or BASIC in text] == []
    assert "extraheader" not in seen["git_config"].lower()
    assert "token" not in repr(req)
    logged = json.dumps(logs, default=str) + "".join(capfd.readouterr())
    assert logs and TOKEN not in logged and BASIC not in logged


async def test_a_wrong_token_is_refused_and_the_failure_carries_no_secret(
    remote, http_url, tmp_path, capfd
):
    url, _ = http_url
    wrong = "ghs_WrongTokenWrongTokenWrongToken"
    argv, record = fixer_script(tmp_path, "record(ran=True)\n")
    with structlog.testing.capture_logs() as logs:
        verdict = await CommandFixer(argv, 20, workdir_root=tmp_path / "work").run(
            make_request(remote, clone_url=url, token=wrong))

    assert verdict.finished is False and verdict.detail.startswith("git clone failed")
    assert not record.exists()
    assert wrong not in json.dumps(logs, default=str) + verdict.detail + "".join(capfd.readouterr())


async def test_the_fake_fixer_pushes_over_http_with_the_token(remote, http_url, tmp_path):
    url, _ = http_url
    verdict = await ScriptedFixer(["push"], workdir_root=tmp_path / "work").run(
        make_request(remote, clone_url=url, token=TOKEN))
    assert verdict.pushed_head == remote.head() != remote.entry_head
