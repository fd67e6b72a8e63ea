"""A throwaway PostgreSQL cluster for the test session, started from the installed binaries.

Set CONVERGEBOT_TEST_POSTGRES_URL to use an existing server instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    pass


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if candidates:
        return candidates[0]
    raise PostgresUnavailable(
        f"PostgreSQL's {name} was not found: install PostgreSQL (Debian: apt-get install postgresql) "
        "or set CONVERGEBOT_TEST_POSTGRES_URL"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="convergebot-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        # initdb refuses to run as root; the Debian package provides the postgres user.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *cmd: str) -> None:
        subprocess.run([*self._as, *cmd], check=True, capture_output=True, timeout=120)

    def start(self) -> str:
        initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
        if self._as:
            shutil.chown(self.root, "postgres")
        self._run(initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(pg_ctl, "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w", "start")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        try:
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except (subprocess.SubprocessError, PostgresUnavailable):
            pass
        shutil.rmtree(self.root, ignore_errors=True)
