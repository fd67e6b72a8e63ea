# Two commands do all the set-up on a fresh machine:
#   make demo   install into .venv, then run `convergebot demo`: the bot against its built-in
#               GitHub simulator on a temporary SQLite file
#   make test   install into .venv (and PostgreSQL if missing), then run the whole suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install guards

install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(STAMP)
	$(VENV)/bin/convergebot demo

test: $(STAMP)
	scripts/ensure-postgres.sh
	$(PY) -m pytest

# Break each guard on purpose (in a throwaway worktree of HEAD) and check its named test fails.
guards: $(STAMP)
	$(PY) scripts/guards.py
