# Model Factory: `make demo` and `make test` are all a fresh machine needs.
.DEFAULT_GOAL := help
SHELL := /bin/bash

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU build of torch lies on disk; installing it first stops pip from resolving a CUDA build.
TORCH := torch==2.13.0
# The JVM class-data-sharing archive that lets Spark start seconds sooner (factory_cli/spark_classes.py).
CLASSES := $(VENV)/share/factory/spark-classes.jsa
PIP := $(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt

.PHONY: help install demo experiments-demo test test-fast lint format lock java clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert (3, 11) <= sys.version_info[:2] < (3, 13), "Python 3.11 or 3.12 is needed, found " + sys.version' \
		|| { echo "error: set PYTHON=/path/to/python3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) $(TORCH)
	$(PIP) -e '.[dev]'
	@touch $@

install: $(STAMP) ## create .venv and install everything pinned

$(CLASSES): $(STAMP) | java
	$(BIN)/python -m factory_cli.spark_classes $@

java: ## check that Java 17+ is present (Spark needs it)
	@command -v java >/dev/null || { echo "error: Spark needs Java 17; install it with: apt-get install -y openjdk-17-jre-headless"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p'); [ "$${v:-0}" -ge 17 ] \
		|| { echo "error: Spark needs Java 17 or newer, found $$v; install openjdk-17-jre-headless"; exit 1; }

demo: install java $(CLASSES) ## run the whole chain on the embedded default (.factory/)
	$(BIN)/factory demo

experiments-demo: install java $(CLASSES) ## mixture search on real data: 3 components, 16 proxies on Ray Tune
	$(BIN)/python -m experiments.demo

# Two test processes (pytest-xdist), each given whole files: most tests spend much of their time
# starting and waiting on processes (a JVM, Ray, torchrun), which overlap even on 2 cores. Files
# are handed out in collection order (tests/conftest.py puts the slow ones first), not xdist's
# default of the files with the most tests first.
TEST_WORKERS ?= 2

test: install java $(CLASSES) ## run the test suite on real Spark, Iceberg catalogs, Ray and torchrun
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

test-fast: install ## the tests that need no JVM, Ray cluster or torchrun: the edit-test loop (about 3-4 minutes)
	$(BIN)/python -m pytest -q -m "not engine and not slow"

lint: install ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install ## ruff fix and format
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

lock: ## re-resolve the pinned versions into constraints.txt
	rm -rf /tmp/factory-lock && $(PYTHON) -m venv /tmp/factory-lock
	/tmp/factory-lock/bin/pip install -q $(TORCH) && /tmp/factory-lock/bin/pip install -q -e '.[dev]'
	{ head -2 constraints.txt; /tmp/factory-lock/bin/pip freeze --exclude-editable | grep -v '^torch=='; echo '$(TORCH)'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean: ## remove .venv, .factory and caches
	rm -rf $(VENV) .factory .pytest_cache .ruff_cache
