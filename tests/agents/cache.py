"""Where `make agents` keeps the pinned agent CLIs (tests/agents/pins.toml), outside the tree."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

PINS = Path(__file__).with_name("pins.toml")


def cache() -> Path:
    """`$CONVERGEBOT_AGENTS_CACHE`, else /var/cache/convergebot/agents for root (readable by an
    unprivileged run too) and ~/.cache/convergebot/agents for anyone else."""
    if os.environ.get("CONVERGEBOT_AGENTS_CACHE"):
        return Path(os.environ["CONVERGEBOT_AGENTS_CACHE"])
    if os.geteuid() == 0:
        return Path("/var/cache/convergebot/agents")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "convergebot" / "agents"


def pins() -> dict[str, dict]:
    return tomllib.loads(PINS.read_text())


def folder(pin: dict) -> str:
    """A pin's folder in the cache, named for its package and version."""
    spec = pin.get("npm") or pin["pypi"]
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in spec).strip("_")


def program(name: str) -> Path | None:
    """The pinned CLI's executable in the cache, or None when it is not installed there."""
    pin = pins()[name]
    where = cache() / folder(pin)
    if not (where / ".installed").is_file():
        return None
    return where / ("node_modules/.bin" if "npm" in pin else "bin") / pin["program"]


def version(name: str) -> str:
    pin = pins()[name]
    spec = pin.get("npm") or pin["pypi"]
    return spec.rpartition("@")[2] if "npm" in pin else spec.rpartition("=")[2]
