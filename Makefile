# Two commands do all the set-up on a fresh machine:
#   make demo   install into .venv, then run convergebot on a temporary SQLite database
#   make test   install into .venv (and PostgreSQL if missing), then run the whole suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install

install: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(STAMP)
	scripts/demo.sh $(VENV)/bin/convergebot

test: $(STAMP)
	scripts/ensure-postgres.sh
	$(PY) -m pytest
