#!/usr/bin/env python3
"""`make agents`: the real agent CLIs, at the versions in tests/agents/pins.toml, run end to end.

    scripts/agents.py install     install each pinned CLI into the cache (once per version)
    scripts/agents.py test [ARGS] run tests/agents with the cache: as this user and, when this is
                                  root, again as an unprivileged user (uid 65534, a home of its own)
    scripts/agents.py where       print the cache's path

The cache is `$CONVERGEBOT_AGENTS_CACHE`, else /var/cache/convergebot/agents for root (readable by
the unprivileged run) and ~/.cache/convergebot/agents for anyone else. Each CLI goes in a folder
named for its pin: npm packages with `npm install --prefix`, PyPI ones in a virtualenv of the
system's python3. Nothing is written in the tree. tests/agents skips when the cache lacks a pin.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


sys.path.insert(0, str(ROOT))
from tests.agents.cache import cache, folder, pins  # noqa: E402  (the tree's own module)


def system_python() -> str:
    """A python3 every user can run: the aider virtualenv (and the unprivileged test run's) must
    not point into root's home."""
    return shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


def install() -> int:
    root = cache()
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    for name, pin in pins().items():
        where = root / folder(pin)
        if (where / ".installed").is_file():
            print(f"{name}: {where} (cached)", flush=True)
            continue
        shutil.rmtree(where, ignore_errors=True)
        started = time.monotonic()
        print(f"{name}: installing {pin.get('npm') or pin['pypi']} ...", flush=True)
        if "npm" in pin:
            subprocess.run(["npm", "install", "--prefix", str(where), "--no-audit", "--no-fund",
                            "--loglevel", "error", pin["npm"]], check=True)
        else:
            subprocess.run([system_python(), "-m", "venv", str(where)], check=True)
            subprocess.run([str(where / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                            pin["pypi"]], check=True)
        (where / ".installed").write_text(json.dumps(pin) + "\n")
        subprocess.run(["chmod", "-R", "a+rX", str(where)], check=True)
        print(f"{name}: installed in {time.monotonic() - started:.0f} s", flush=True)
    return 0


def _unprivileged_venv(root: Path) -> Path:
    """A virtualenv of the project that uid 65534 can run (the tree's own .venv may point into
    root's home): built once in the cache, the project installed from the tree in edit mode."""
    venv = root / "runner-venv"
    stamp = venv / ".installed"
    wanted = (ROOT / "pyproject.toml").read_text()
    if not stamp.is_file() or stamp.read_text() != wanted:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([system_python(), "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                        "-e", f"{ROOT}[test]"], check=True)
        stamp.write_text(wanted)
        subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
    return venv


def test(args: list[str]) -> int:
    root = cache()
    reports = Path(tempfile.mkdtemp(prefix="convergebot-agents-report-"))
    os.chmod(reports, 0o777)  # each run writes its own file there, the unprivileged one too
    env = {**os.environ, "CONVERGEBOT_AGENTS_CACHE": str(root),
           "CONVERGEBOT_AGENTS_REPORT": str(reports / "as-invoker.jsonl")}
    pytest = [sys.executable, "-m", "pytest", "tests/agents", "-p", "no:cacheprovider", *args]
    runs = [(f"as {pwd.getpwuid(os.geteuid()).pw_name}", pytest, env)]
    if os.geteuid() == 0:
        home = Path(tempfile.mkdtemp(prefix="convergebot-agents-home-"))
        os.chown(home, NOBODY, NOBODY)
        venv = _unprivileged_venv(root)
        unprivileged = {**env, "HOME": str(home), "USER": "nobody", "LOGNAME": "nobody",
                        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
                        "CONVERGEBOT_AGENTS_REPORT": str(reports / "as-uid-65534.jsonl")}
        unprivileged.pop("XDG_CACHE_HOME", None)
        runs.append(("as uid 65534", ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                       str(venv / "bin" / "python"), *pytest[1:]], unprivileged))
    failed = 0
    for label, argv, run_env in runs:
        print(f"== tests/agents {label}", flush=True)
        failed |= subprocess.run(argv, cwd=ROOT, env=run_env).returncode != 0
    rows = [line for path in sorted(reports.glob("*.jsonl")) for line in path.read_text().splitlines()]
    if rows:
        print("\n== per preset and user: each test's seconds, from serve's start to its outcome")
        for line in rows:
            row = json.loads(line)
            print(f"{row['preset']:<12} {row['user']:<8} {row['test']:<28} {row['outcome']:<8} "
                  f"{row['seconds']:7.1f} s  {row.get('note', '')}")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("install", "test", "where"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "install":
        return install()
    if argv[0] == "where":
        print(cache())
        return 0
    return test(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
