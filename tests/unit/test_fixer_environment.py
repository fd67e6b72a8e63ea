"""Environments for git and for the fixer command: where the token may and may not go."""

from __future__ import annotations

import base64
import os

import pytest

from bot.fixers.environment import (
    GitIdentity,
    check_clone_url,
    credential_env,
    fixer_env,
    git_env,
    scrub,
    secret_forms,
)

TOKEN = "ghs_abc123"
INHERITED = {
    "PATH": "/usr/bin",
    "HOME": "/home/bot",
    "ANTHROPIC_API_KEY": "agent-key",
    "CONVERGEBOT_GITHUB_TOKEN": TOKEN,
    "CONVERGEBOT_DATABASE_URL": "postgresql://u:pw@db/x",
    "GIT_DIR": "/elsewhere/.git",
    "GIT_CONFIG_COUNT": "1",
    "GH_TOKEN": TOKEN,
}


def test_the_token_goes_to_git_as_a_basic_header_scoped_to_the_clone_host():
    env = credential_env("https://github.com/acme/widgets.git", TOKEN)
    assert env == {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.https://github.com/.extraHeader",
        "GIT_CONFIG_VALUE_0": "Authorization: Basic "
        + base64.b64encode(b"x-access-token:" + TOKEN.encode()).decode(),
    }


@pytest.mark.parametrize("url,token", [
    ("file:///tmp/r.git", TOKEN), ("https://github.com/a/b", None), ("https://github.com/a/b", ""),
])
def test_no_credentials_without_a_token_or_over_file(url, token):
    assert credential_env(url, token) == {}


def test_git_env_isolates_git_and_drops_the_bots_settings():
    env = git_env(GitIdentity("bot", "bot@x"), "https://github.com/a/b", TOKEN, INHERITED)
    assert env["GIT_CONFIG_GLOBAL"] == os.devnull and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert (env["GIT_AUTHOR_NAME"], env["GIT_COMMITTER_EMAIL"]) == ("bot", "bot@x")
    assert "GIT_DIR" not in env and "CONVERGEBOT_GITHUB_TOKEN" not in env
    assert "CONVERGEBOT_DATABASE_URL" not in env
    assert env["GIT_CONFIG_COUNT"] == "1" and env["GIT_CONFIG_KEY_0"].endswith(".extraHeader")
    assert "ext" not in env["GIT_ALLOW_PROTOCOL"].split(":")


def test_the_fixer_env_carries_no_secret_of_the_bot():
    env = fixer_env(GitIdentity(), {"CONVERGEBOT_ROUND": "2"}, secret_forms(TOKEN), INHERITED)
    assert not any(TOKEN in v for v in env.values())
    credential_vars = ("GIT_CONFIG_COUNT", "GIT_CONFIG_KEY", "GIT_CONFIG_VALUE")
    assert not any(k.startswith(credential_vars) for k in env)
    assert "GH_TOKEN" not in env and "GIT_DIR" not in env
    assert "CONVERGEBOT_DATABASE_URL" not in env
    assert env["CONVERGEBOT_ROUND"] == "2"
    assert env["ANTHROPIC_API_KEY"] == "agent-key" and env["PATH"] == "/usr/bin"
    assert env["GIT_AUTHOR_NAME"] == "convergebot"


def test_scrub_removes_the_token_and_its_header_form():
    header = credential_env("https://h/", TOKEN)["GIT_CONFIG_VALUE_0"]
    assert scrub(f"failed {TOKEN} with {header}", secret_forms(TOKEN)) == (
        "failed *** with Authorization: Basic ***")
    assert secret_forms(None) == () and scrub("x", ()) == "x"


@pytest.mark.parametrize("url", ["ext::sh -c id", "ssh://git@github.com/a/b", "git@github.com:a/b",
                                 "-uhttps://x", "https://x-access-token:t@github.com/a/b",
                                 "https://user@github.com/a/b"])
def test_unusable_clone_urls_are_refused(url):
    with pytest.raises(ValueError):
        check_clone_url(url)


@pytest.mark.parametrize("url", ["https://github.com/a/b.git", "http://127.0.0.1:9/r.git",
                                 "file:///tmp/r.git"])
def test_usable_clone_urls(url):
    check_clone_url(url)
