PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: install install-dev up test test-fast test-deps test-django6 lint docs bench fault-run clean

# chit with every extra (the HTTP API, PostgreSQL, the client, ...): what
# `make up` and `make bench` need. `pip install chit` alone is the core.
install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all]'
	touch $(STAMP)

# The test, lint and docs tools besides (pytest, ruff, mypy, schemathesis, playwright, mkdocs).
install-dev: $(DEV_STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(DEV_STAMP)

# The one-command start: workers (and the HTTP API) on sqlite:///chit.db with the example jobs.
up: install
	$(BIN)/chit up --app examples.app:queue --demo

# Test processes (pytest-xdist). Most tests wait on worker processes, servers
# and a browser rather than compute, so 3 on 2 cores beat 2; each has its own
# PostgreSQL database. `--dist loadscope` keeps a module's tests (and its
# module fixtures: the wheel, the docs site) in one process.
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadscope

# The whole suite (about 3,200 tests: some 10 minutes on 2 cores). First starts PostgreSQL if it is
# down and installs what is missing from Debian's packages (scripts/test-deps.sh).
test: install-dev lint test-deps
	$(BIN)/pytest -q $(XDIST) $(PYTEST_ARGS)
	$(MAKE) test-django6

# The inner loop: every test not marked slow (no worker processes, no browser,
# no private PostgreSQL servers, the in-process API and dashboard tests on SQLite
# only); about a minute on 2 cores.
test-fast: install-dev test-deps
	$(BIN)/pytest -q -m 'not slow' $(XDIST) $(PYTEST_ARGS)

test-deps:
	@scripts/test-deps.sh

# Django 6 (django.tasks) needs Python 3.12; .venv runs 3.11, where the suite
# tests chit.contrib.django on Django 5.2 with the django-tasks backport. This
# runs tests/django again on Django 6, in a venv of its own (20 seconds).
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12))
DJANGO6 := .venv-django6

$(DJANGO6)/.installed: pyproject.toml
	@test -n "$(PYTHON312)" || { echo "test-django6: no python3.12 found (set PYTHON312)"; exit 1; }
	$(PYTHON312) -m venv $(DJANGO6)
	$(DJANGO6)/bin/pip install --quiet --upgrade pip
	$(DJANGO6)/bin/pip install --quiet -e '.[dev]'
	touch $@

test-django6: $(DJANGO6)/.installed test-deps
	$(DJANGO6)/bin/pytest -q tests/django

lint: install-dev
	$(BIN)/ruff check src tests examples bench scripts
	$(BIN)/ruff format --check src tests examples bench scripts
	$(BIN)/mypy

# The docs site (mkdocs.yml over docs/, the API reference from the docstrings)
# into site/; any warning fails the build. `.venv/bin/mkdocs serve` to preview.
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# chit against its peers (docs/benchmarks.md, docs/benchmarks.png); about 25 minutes on 2 cores.
# The peers live in their own venv. `make bench BENCH_ARGS=--quick` for a short run.
PEERS := bench/.venv-peers
PEERS_STAMP := $(PEERS)/.installed

$(PEERS_STAMP): bench/requirements-peers.txt
	$(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install --quiet --upgrade pip
	$(PEERS)/bin/pip install --quiet -r bench/requirements-peers.txt
	touch $(PEERS_STAMP)

bench: install $(PEERS_STAMP)
	$(PEERS)/bin/python bench/run.py $(BENCH_ARGS)

# The fault run (docs/operations.md, "Fault run"): jobs submitted over HTTP while
# the API and workers are killed -9 and a private PostgreSQL server is crashed;
# fails if an acknowledged job is lost or the API answers a 5xx other than 503.
# About 3 minutes; not part of `make test`. FAULT_ARGS="--backend sqlite --seconds 60".
fault-run: install-dev
	$(BIN)/python scripts/fault_run.py $(FAULT_ARGS)

clean:
	rm -rf $(VENV) $(DJANGO6) site chit.db chit.db-wal chit.db-shm
