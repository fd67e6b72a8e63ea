"""Secrets read from files (`<key>_file`), and the list of files a fixer's sandbox hides."""

import pytest

from bot.config import ConfigError, load_config


def test_each_secret_can_be_read_from_a_file_named_in_the_file_or_the_environment(tmp_path):
    for name, value in {"token": "ghs_fromfile", "hook": "hook-secret", "api": "api-secret",
                        "db": "postgresql://u:pw@db/convergebot"}.items():
        (tmp_path / name).write_text(f"  {value}\n")
    f = tmp_path / "c.toml"
    f.write_text(f'[github]\ntoken_file = "{tmp_path / "token"}"\n'
                 f'webhook_secret_file = "{tmp_path / "hook"}"\n'
                 f'[database]\nurl_file = "{tmp_path / "db"}"\n')
    cfg = load_config(f, env={"CONVERGEBOT_SERVER_API_TOKEN_FILE": str(tmp_path / "api")})

    assert cfg.github.token.get_secret_value() == "ghs_fromfile"
    assert cfg.github.webhook_secret.get_secret_value() == "hook-secret"
    assert cfg.server.api_token.get_secret_value() == "api-secret"
    assert cfg.database.url == "postgresql://u:pw@db/convergebot"
    assert "ghs_fromfile" not in repr(cfg)


def test_a_secret_and_its_file_both_given_is_an_error(tmp_path):
    (tmp_path / "token").write_text("ghs_a")
    with pytest.raises(ConfigError, match=r"github\.token and github\.token_file are both set"):
        load_config(env={"CONVERGEBOT_GITHUB_TOKEN": "ghs_b",
                         "CONVERGEBOT_GITHUB_TOKEN_FILE": str(tmp_path / "token")})


@pytest.mark.parametrize("content", [None, "  \n"])
def test_a_missing_or_empty_secret_file_names_its_key_and_not_its_content(tmp_path, content):
    path = tmp_path / "hook"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=r"github\.webhook_secret_file: .*hook"):
        load_config(env={"CONVERGEBOT_GITHUB_WEBHOOK_SECRET_FILE": str(path)})


def test_secret_files_are_the_config_its_secret_files_the_app_key_and_the_sqlite_database(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "token").write_text("ghs_x")
    (tmp_path / "convergebot.toml").write_text(
        '[github]\ntoken_file = "token"\nprivate_key_path = "~/app.pem"\n'
        '[database]\nurl = "sqlite:///./state/bot.db"\n')
    cfg = load_config(env={"HOME": "/home/bot"})

    files = {str(p) for p in cfg.secret_files()}
    db = tmp_path / "state" / "bot.db"
    assert str(tmp_path / "convergebot.toml") in files and str(tmp_path / "token") in files
    assert {str(db), f"{db}-wal", f"{db}-shm", f"{db}-journal"} <= files
    assert any(f.endswith("/app.pem") and not f.startswith("~") for f in files)


def test_without_a_file_or_sqlite_there_are_no_secret_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(env={"CONVERGEBOT_DATABASE_URL": "postgresql://db/x",
                           "CONVERGEBOT_GITHUB_TOKEN": "ghs_x"})
    assert cfg.secret_files() == ()
