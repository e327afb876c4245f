PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install up test lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The one-command start: workers (and the HTTP API) on sqlite:///chit.db with the example jobs.
up: install
	$(BIN)/chit up --app examples.app:queue --demo

test: install lint
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench

bench: install
	$(BIN)/python bench/core_bench.py

clean:
	rm -rf $(VENV) chit.db chit.db-wal chit.db-shm
