PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: install install-dev up test test-fast test-deps lint bench clean

# chit itself: what `make up` and `make bench` need.
install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(STAMP)

# The test and lint tools besides (pytest, ruff, mypy, schemathesis, playwright).
install-dev: $(DEV_STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(DEV_STAMP)

# The one-command start: workers (and the HTTP API) on sqlite:///chit.db with the example jobs.
up: install
	$(BIN)/chit up --app examples.app:queue --demo

# The whole suite (6 minutes on 2 cores). First starts PostgreSQL if it is
# down and installs what is missing from Debian's packages (scripts/test-deps.sh).
test: install-dev lint test-deps
	$(BIN)/pytest -q $(PYTEST_ARGS)

# The inner loop: every test not marked slow (no worker processes, no browser,
# no private PostgreSQL servers, the in-process API and dashboard tests on SQLite
# only); about a minute on 2 cores.
test-fast: install-dev test-deps
	$(BIN)/pytest -q -m 'not slow' $(PYTEST_ARGS)

test-deps:
	@scripts/test-deps.sh

lint: install-dev
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy

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

clean:
	rm -rf $(VENV) chit.db chit.db-wal chit.db-shm
