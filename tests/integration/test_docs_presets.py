"""The preset configurations docs/fixers.md shows start `convergebot serve` as written: each
`# preset:` block of the page, with only the database, GitHub and port settings around it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bot.fixers.presets import PRESETS

from .test_serve import _wait_for_port

DOCS = Path(__file__).resolve().parents[2] / "docs" / "fixers.md"
BLOCK = re.compile(r"^```toml\n(# preset: ([\w-]+).*?)^```", re.MULTILINE | re.DOTALL)


def documented() -> dict[str, str]:
    return {name: text for text, name in BLOCK.findall(DOCS.read_text())}


def test_the_page_shows_one_configuration_per_preset():
    assert sorted(documented()) == sorted(PRESETS)


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_documented_configuration_starts_serve(preset, tmp_path):
    home = tmp_path / "home"  # the preset's state directories are created in the bot's home
    home.mkdir()
    config = tmp_path / "convergebot.toml"
    config.write_text(documented()[preset] + "\n[server]\nport = 0\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    env |= {"HOME": str(home), "CONVERGEBOT_DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}",
            "CONVERGEBOT_GITHUB_API_URL": "http://127.0.0.1:9/", "CONVERGEBOT_GITHUB_TOKEN": "t",
            "CONVERGEBOT_GITHUB_WEBHOOK_SECRET": "s"}
    proc = subprocess.Popen([sys.executable, "-m", "bot", "serve", "--config", str(config)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_port(proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    # Its state directories exist, created at start: the sandbox can bind them.
    for path in PRESETS[preset].state_paths(home):
        assert path.is_dir(), (path, [json.loads(line).get("event") for line in err.splitlines()
                                      if line.startswith("{")])
