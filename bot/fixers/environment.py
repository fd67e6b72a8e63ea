"""Environments for the git processes the bot runs and for the fixer command (pure).

The token reaches git only through GIT_CONFIG_COUNT/KEY/VALUE variables, as an
`http.<origin>.extraHeader` scoped to the clone URL's host: never argv, never a config file, and
never the fixer command's environment.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

ALLOWED_SCHEMES = ("https", "http", "file")


@dataclass(frozen=True)
class GitIdentity:
    name: str = "convergebot"
    email: str = "convergebot@users.noreply.github.com"


def base_env(identity: GitIdentity, inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """The inherited environment made safe to hand to git or to a fixer.

    Dropped: the bot's own CONVERGEBOT_* settings (tokens, webhook secret, database URL) and any
    inherited GIT_* variable (a GIT_DIR from a hook would point git at the wrong repository).
    The user's and system git config are ignored: commit signing or hooks configured for a
    developer would otherwise make the bot's commits fail or behave differently.
    """
    inherited = os.environ if inherited is None else inherited
    env = {
        k: v
        for k, v in inherited.items()
        if not k.upper().startswith(("CONVERGEBOT_", "GIT_"))
    }
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=identity.name,
        GIT_AUTHOR_EMAIL=identity.email,
        GIT_COMMITTER_NAME=identity.name,
        GIT_COMMITTER_EMAIL=identity.email,
    )
    return env


def credential_env(clone_url: str, token: str | None) -> dict[str, str]:
    """GIT_CONFIG_* variables that send the token as a Basic auth header to the clone's host only.

    Scoping the header to `scheme://host/` keeps it from following a redirect or a submodule
    URL to another host.
    """
    parts = urlsplit(clone_url)
    if not token or parts.scheme not in ("https", "http"):
        return {}
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"http.{parts.scheme}://{parts.netloc}/.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {_basic(token)}",
    }


def git_env(
    identity: GitIdentity,
    clone_url: str,
    token: str | None,
    inherited: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """For the bot's own git processes; with a token only where it must talk to the remote."""
    env = base_env(identity, inherited)
    env["GIT_ALLOW_PROTOCOL"] = ":".join(ALLOWED_SCHEMES)  # no ext::, no ssh surprises
    env["LC_ALL"] = "C"  # stable messages to parse
    env.update(credential_env(clone_url, token))
    return env


def fixer_env(
    identity: GitIdentity,
    extra: Mapping[str, str],
    secrets: tuple[str, ...] = (),
    inherited: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """For the fixer command: its own tools' settings (PATH, HOME, API keys) pass through,
    the bot's secrets do not, and any variable that carries one of `secrets` is dropped."""
    env = base_env(identity, inherited)
    env = {k: v for k, v in env.items() if not any(s and s in v for s in secrets)}
    env.update(extra)
    return env


def secret_forms(token: str | None) -> tuple[str, ...]:
    """The token and the encodings the bot ever puts it in, for scrubbing text."""
    return (token, _basic(token)) if token else ()


def _basic(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def check_clone_url(clone_url: str) -> None:
    """Raise ValueError for a URL the bot will not hand to git (and never echo credentials)."""
    parts = urlsplit(clone_url)
    if parts.scheme not in ALLOWED_SCHEMES or clone_url.startswith("-"):
        raise ValueError(f"clone URL scheme {parts.scheme!r} is not one of {ALLOWED_SCHEMES}")
    if parts.password or (parts.username and parts.scheme != "file"):
        raise ValueError("clone URL must not carry credentials: pass the token separately")
