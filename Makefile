# Two commands for a newcomer: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLES := manifests/examples

.PHONY: setup demo test lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

demo: setup
	$(BIN)/draquota count $(EXAMPLES)/workloads/*.yaml --state $(EXAMPLES)/cluster
	$(BIN)/draquota check $(EXAMPLES)/workloads/*.yaml --state $(EXAMPLES)/cluster

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
