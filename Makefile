# corpus — the two set-up commands are `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export CORPUS_HOME ?= $(CURDIR)/var
ifeq (,$(findstring ://,$(CORPUS_HOME)))
export DAGSTER_HOME ?= $(CORPUS_HOME)/dagster
else
# CORPUS_HOME is an object-store URL: Dagster's home lives on the local root (CORPUS_LOCAL);
# settings.py is the one place that decides where (docs/operations.md).
export DAGSTER_HOME ?= $(shell $(PYTHON) corpus_assets/domain/core/settings.py dagster_home)
endif
UI_PORT ?= 3000
PYDOC_PORT ?= 7464

.PHONY: install instance demo test test-fast ui dev pydoc bench-canonicalize clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,distributed,k8s]"
	touch $@

install: $(VENV)/.installed

# The Dagster instance config shipped with the project (run queue, run concurrency, the
# catalog_writer pool; see docs/operations.md), copied into $(DAGSTER_HOME) only when that has
# no dagster.yaml: a file already there is never overwritten.
instance:
	@mkdir -p "$(DAGSTER_HOME)"
	@if [ -e "$(DAGSTER_HOME)/dagster.yaml" ]; then \
	  echo "instance: keeping $(DAGSTER_HOME)/dagster.yaml"; \
	else \
	  cp deploy/dagster.yaml "$(DAGSTER_HOME)/dagster.yaml" && \
	  echo "instance: installed deploy/dagster.yaml as $(DAGSTER_HOME)/dagster.yaml"; \
	fi

# Build every layer that exists so far for the demo sources, through Dagster, and print a summary.
demo: install instance
	$(BIN)/corpus demo

# The whole test suite: unit and integration (CI runs exactly this), a test file per worker
# process at a time (pytest-xdist, --dist loadfile: a module's fixtures stay in one process).
# TEST_WORKERS=0 runs it in this one process. Two workers: 10.4 min instead of 18.7 for tests/integration here.
TEST_WORKERS ?= 2
test: install
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

# The developer loop: the unit tests only (pure, in-process; no Dagster instance, daemon,
# webserver, S3, Dask or browser). tests/integration/ holds the rest.
test-fast: install
	$(BIN)/pytest -q tests/unit

# The Dagster UI on 127.0.0.1 over the same instance the demo wrote to.
ui: install instance
	$(BIN)/dagster-webserver -h 127.0.0.1 -p $(UI_PORT) -w workspace.yaml

# UI plus the daemon, so schedules (incremental crawls), sensors and backfills run. The project is
# a dg project ([tool.dg] in pyproject.toml): `dg dev` loads the same code location as workspace.yaml
# (`make ui`); `dg check defs` and `dg list defs` check and list it.
dev: install instance
	$(BIN)/dg dev --host 127.0.0.1 --port $(UI_PORT)

# The documentation site the pydocs crawl source reads (keep it running for scheduled crawls).
pydoc:
	$(BIN)/python -m pydoc -n 127.0.0.1 -p $(PYDOC_PORT)

bench-canonicalize: install
	$(BIN)/pip install --quiet -e ".[bench]"
	bash bench/fetch_debian_docs.sh
	$(BIN)/python bench/bench_canonicalize.py

clean:
	rm -rf var .pytest_cache
