# Two commands for a newcomer: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLES := manifests/examples

.PHONY: setup demo test unit e2e lint bench clean

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

# The unit suite, then the e2e tier against a real control plane (../shared/k8s or
# $$DRAQUOTA_K8S_DIR; skipped with one line saying why when it is not there).
test: lint
	$(BIN)/python -m pytest -m "not e2e"
	$(MAKE) --no-print-directory e2e

unit: setup
	$(BIN)/python -m pytest -m "not e2e"

# pytest exits 5 when no test is selected: not a failure here.
e2e: setup
	$(BIN)/python -m pytest -m e2e -p no:cacheprovider || [ $$? -eq 5 ]

bench: setup
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
