# Two commands do all the set-up on a fresh machine:
#   make demo   install into .venv, then run `convergebot demo`: the bot against its built-in
#               GitHub simulator on a temporary SQLite file
#   make test   install into .venv (and PostgreSQL if missing), then run the whole suite
#   make chaos  the chaos suite at full size (docs/chaos.md): 40 PRs, 5 kills, 3 seeds, both backends
#   make agents the real agent CLIs (tests/agents/pins.toml), installed into a cache outside the
#               tree, each preset run end to end through serve (docs/fixers.md, "make agents")
#   make lock   write the lock files again from pyproject.toml (docs/operations.md, "Image and compose")
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install guards chaos agents lock image-digests

# Every dependency pinned, with the hash of each of its files: LOCK is what the image installs,
# TEST_LOCK the same pins and the test extra, what this venv (and so CI) installs. The project
# itself goes in without its dependencies, so nothing unpinned comes along.
LOCK := requirements/lock.txt
TEST_LOCK := requirements/test-lock.txt

install: $(STAMP)

$(STAMP): pyproject.toml $(LOCK) $(TEST_LOCK)
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r $(TEST_LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

# The lock files from pyproject.toml's ranges, for the Python of the image and CI (3.11, Linux
# x86_64; the hashes cover every file of each release, so another platform installs them too).
# A pin still in range is kept; `make lock UPGRADE=1` takes the newest release of everything.
# The test lock is constrained by the runtime one, so the two never pin a package differently.
# uv comes at a pinned version into a cache outside the tree.
UV_VERSION := 0.13.9
UV_HOME ?= $(HOME)/.cache/convergebot/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv
UPGRADE ?=
LOCK_ARGS := --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-unknown-linux-gnu --custom-compile-command 'make lock' \
	$(if $(UPGRADE),--upgrade)
lock: $(UV)
	$(UV) pip compile pyproject.toml $(LOCK_ARGS) -o $(LOCK)
	$(UV) pip compile pyproject.toml --extra test -c $(LOCK) $(LOCK_ARGS) -o $(TEST_LOCK)

$(UV):
	python3 -m venv $(UV_HOME)
	$(UV_HOME)/bin/python -m pip install --quiet uv==$(UV_VERSION)

# The digests the image and compose.yaml can be pinned to (docs/operations.md, "Image and
# compose"): asks the registry, so it needs Docker with buildx and the registry's network.
IMAGES := python:3.11-slim postgres:16 nginx:1.28-alpine
image-digests:
	@set -e; for image in $(IMAGES); do \
	  digest=$$(docker buildx imagetools inspect "$$image" --format '{{json .Manifest.Digest}}'); \
	  echo "$$image@$$digest" | tr -d '"'; \
	done

demo: $(STAMP)
	$(VENV)/bin/convergebot demo

# The suite runs on TEST_WORKERS processes (pytest-xdist), each with its own PostgreSQL cluster.
# Three on two cores: much of the suite waits (on webhooks, polls, child processes), and a
# worker that runs out of tests takes queued ones from the others (worksteal), so the long
# end-to-end runs do not leave one worker alone at the end. Measured on 2 vCPU: 15 min with
# two workers and the default scheduling, 10 min with three and worksteal.
TEST_WORKERS ?= 3
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy bot storage simulator sharedio
	scripts/ensure-postgres.sh
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal

# Break each guard on purpose (in a scratch copy of the tree) and check its named tests fail:
# the catalogue is tests/guards/*.toml, its page docs/guards.md.
guards: $(STAMP)
	scripts/ensure-postgres.sh
	$(PY) scripts/guards.py

# The real bot process under GitHub faults, webhook faults and SIGKILLs, at full size
# (`make test` runs the same tests small). Override any of these on the command line;
# CHAOS_ARGS goes to pytest (e.g. CHAOS_ARGS="-x --basetemp=/tmp/chaos").
CHAOS_PRS ?= 40
CHAOS_KILLS ?= 5
CHAOS_SEEDS ?= 1,2,3
CHAOS_ARGS ?=
chaos: $(STAMP)
	scripts/ensure-postgres.sh
	CONVERGEBOT_CHAOS_PRS=$(CHAOS_PRS) CONVERGEBOT_CHAOS_KILLS=$(CHAOS_KILLS) \
	CONVERGEBOT_CHAOS_SEEDS=$(CHAOS_SEEDS) $(PY) -m pytest tests/chaos -m chaos -s $(CHAOS_ARGS)

# The real agent CLIs at their pinned versions (tests/agents/pins.toml), installed once into a
# cache outside the tree, then every preset end to end through `serve`, the simulator and the
# sandbox, as this user and (for root) as uid 65534. AGENTS_ARGS goes to pytest.
AGENTS_ARGS ?=
agents: $(STAMP)
	$(PY) scripts/agents.py install
	$(PY) scripts/agents.py test $(AGENTS_ARGS)
