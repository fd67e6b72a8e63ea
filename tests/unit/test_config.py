import pytest

from bot.config import ConfigError, load_config


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(env={})
    assert cfg.database.url == "sqlite:///./convergebot.db"
    assert cfg.jobs.workers == 8


def test_file_then_environment_override(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[database]\nurl = "sqlite:///a.db"\n[jobs]\nworkers = 2\n')
    cfg = load_config(f, env={"CONVERGEBOT_JOBS_WORKERS": "6", "CONVERGEBOT_GITHUB_TOKEN": "ghp_x"})
    assert cfg.database.url == "sqlite:///a.db"
    assert cfg.jobs.workers == 6
    assert cfg.github.token.get_secret_value() == "ghp_x"
    assert "ghp_x" not in repr(cfg)


def test_invalid_env_value_names_the_key_and_variable(tmp_path):
    with pytest.raises(ConfigError, match=r"jobs\.workers: .*CONVERGEBOT_JOBS_WORKERS"):
        load_config(env={"CONVERGEBOT_JOBS_WORKERS": "many"})


def test_invalid_file_value_names_the_key(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[jobs]\nlease_seconds = -1\n")
    with pytest.raises(ConfigError, match=r"jobs\.lease_seconds"):
        load_config(f, env={})


def test_unknown_key_fails_fast(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[jobs]\nworkerz = 2\n")
    with pytest.raises(ConfigError, match=r"jobs\.workerz"):
        load_config(f, env={})
    with pytest.raises(ConfigError, match="CONVERGEBOT_JOBS_WORKERZ"):
        load_config(env={"CONVERGEBOT_JOBS_WORKERZ": "2"})


def test_missing_explicit_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("[jobs\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(bad, env={})


def test_example_config_is_valid_and_complete():
    """config.example.toml documents every key, with its default value."""
    import tomllib
    from pathlib import Path

    from bot.config import Config

    example = Path(__file__).resolve().parents[2] / "config.example.toml"
    data = tomllib.loads(example.read_text())
    Config.model_validate(data)
    defaults = Config()
    for section, field in Config.model_fields.items():
        assert section in data, f"[{section}] missing from config.example.toml"
        for key in field.annotation.model_fields:
            assert key in data[section], f"{section}.{key} missing from config.example.toml"
            value = getattr(getattr(defaults, section), key)
            value = value.get_secret_value() if hasattr(value, "get_secret_value") else value
            assert data[section][key] == value, f"{section}.{key}: example differs from the default"


def test_webhook_hooks_from_the_file_or_the_environment(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[webhooks]\nhooks = { acme = 12, "acme/widgets" = 34 }\n')
    assert load_config(f, env={}).webhooks.hooks == {"acme": 12, "acme/widgets": 34}
    for raw in ('{"acme": 12, "acme/widgets": 34}', "acme=12, acme/widgets=34"):
        assert load_config(env={"CONVERGEBOT_WEBHOOKS_HOOKS": raw}).webhooks.hooks == {"acme": 12, "acme/widgets": 34}


@pytest.mark.parametrize("raw", ["acme", '{"acme": 1', "[1]", "acme/widgets/x=1", "acme=0", "acme=twelve"])
def test_a_malformed_hook_names_the_key_and_variable(raw):
    with pytest.raises(ConfigError, match=r"CONVERGEBOT_WEBHOOKS_HOOKS"):
        load_config(env={"CONVERGEBOT_WEBHOOKS_HOOKS": raw})
