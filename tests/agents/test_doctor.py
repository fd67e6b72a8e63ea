"""`convergebot doctor` on each preset with its real CLI (tests/agents/pins.toml): found, its
version, its start inside the sandbox, its state directories and its key, one line each."""

from __future__ import annotations

import pytest

from bot.config import load_config
from bot.fixers.presets import PRESETS
from bot.surfaces.doctor import run_doctor

from .cache import program, version

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("preset", sorted(PRESETS))
async def test_doctor_checks_the_real_cli(preset, tmp_path, monkeypatch):
    exe = program(preset)
    if exe is None:
        pytest.skip(f"{preset} {version(preset)} is not installed: run `make agents`")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for key in PRESETS[preset].keys:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv(PRESETS[preset].keys[0], "a-key")
    config = load_config(env={
        "CONVERGEBOT_DATABASE_URL": f"sqlite:///{tmp_path / 'd.db'}",
        "CONVERGEBOT_GITHUB_API_URL": "http://127.0.0.1:9/",
        "CONVERGEBOT_FIXER_KIND": "command", "CONVERGEBOT_FIXER_PRESET": preset,
        "CONVERGEBOT_FIXER_COMMAND": f'["{exe}"]', "CONVERGEBOT_FIXER_SANDBOX": "bwrap"})
    lines: list[str] = []
    await run_doctor(config, lines.append)
    fixer = [line for line in lines if preset in line or "fixer" in line]
    assert f"[ok  ] fixer command (preset {preset}): {exe}" in fixer, fixer
    (said,) = [line for line in fixer if line.startswith(f"[ok  ] {preset} version: ")]
    assert version(preset) in said, said
    (inside,) = [line for line in fixer if f"{preset} in the sandbox" in line]
    assert inside.startswith(f"[ok  ] {preset} in the sandbox: starts") and version(preset) in inside, inside
    for path in PRESETS[preset].state_paths(home):
        assert f"[ok  ] {preset} state {path}: missing; serve creates it at start" in fixer, fixer
    assert f"[ok  ] {preset} model key: {PRESETS[preset].keys[0]} is set" in fixer, fixer
