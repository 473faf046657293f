# Two commands for a newcomer: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLES := manifests/examples

.PHONY: setup demo test unit e2e lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@echo "setup: installing draquota and its test tools into $(VENV) (about 30 s, only once)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	@$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $@
	@echo "setup: done; the command line is $(BIN)/draquota"

demo: setup
	@printf '\n# Devices per DeviceClass of the example workloads\n'
	$(BIN)/draquota count $(EXAMPLES)/workloads/ --state $(EXAMPLES)/cluster
	@printf '\n# Quota and usage of the example ClusterQueues\n'
	$(BIN)/draquota status --state $(EXAMPLES)/cluster
	@printf '\n# What-if: the example workloads decided in order against the example cluster\n'
	$(BIN)/draquota check $(EXAMPLES)/workloads/ --state $(EXAMPLES)/cluster
	@printf '\n# What-if: a queueing ClusterQueue (whenFull: Queue) beside a rejecting one\n'
	$(BIN)/draquota check $(EXAMPLES)/queueing/ --state $(EXAMPLES)/cluster
	@printf '\n# Quota by GPU memory: each whole A100 or 1g.5gb slice is 1 device, but holds 40Gi or 5Gi\n'
	$(BIN)/draquota count $(EXAMPLES)/gpu-memory/ --state $(EXAMPLES)/cluster
	@printf '\n# What-if: 8 slices fill the 40Gi GPU-memory quota; a ninth and a whole GPU are denied\n'
	$(BIN)/draquota check $(EXAMPLES)/gpu-memory/ --state $(EXAMPLES)/cluster

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict quota/ webhook/ certs/

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
