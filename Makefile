# solrl — the two ways in: `make demo` and `make test`. Both set up what is missing first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.solrl-installed-$(shell cat pyproject.toml setup.py constraints.txt | sha1sum | cut -c1-12)

.PHONY: setup demo test test-fast bench server clean-runs help

help:
	@echo "make demo   - set up, then train the embedded default with configs/demo.yaml into runs/demo/"
	@echo "make test   - set up, then run the test suite on $(TEST_WORKERS) xdist workers (cores + 1, at most 8; TEST_WORKERS=N)"
	@echo "make test-fast - set up, then run the unit tests that start no process or server and are not slow (pytest -m 'not e2e and not slow', one worker per core)"
	@echo "make bench  - set up, then the baseline against sol_rl over 5 seeds (about an hour on 2 cores) -> runs/bench/report.md"
	@echo "make setup  - create $(VENV) and install solrl with pinned dependencies (constraints.txt)"
	@echo "make server - Prefect (PREFECT_PORT=$(PREFECT_PORT)) and MLflow (MLFLOW_PORT=$(MLFLOW_PORT)) servers on $(SERVER_HOST) (SERVER_HOST=...: docs/security.md; SERVER_DATABASE=postgresql://USER@HOST:PORT: docs/operations.md)"

$(STAMP): pyproject.toml setup.py constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=26"
	$(BIN)/python -m pip install --quiet -c constraints.txt --build-constraint constraints.txt -e '.[test]'
	rm -f $(VENV)/.solrl-installed-*
	touch $@

setup: $(STAMP)

demo: setup
	$(BIN)/solrl train configs/demo.yaml --run-dir runs/demo

# pytest exits 5 when it collected no test: that fails both targets too.
# `make test` runs the suite on xdist workers, a test file whole on one worker (its module fixtures built once); each
# worker starts its own servers (tests/conftest.py). One torch/OpenMP thread per process: the workers share the cores.
# Files go to the workers in the suite's order (--no-loadscope-reorder): the files of e2e or slow tests first
# (tests/support/suite_layout.py), not xdist's by number of tests, which left files of one long test for the end.
# Cores + 1 workers (at most 8): the end-to-end tests wait on servers and subprocesses part of the time; on 2 cores
# 3 workers ran the suite in 17.6 min, 2 in 18.7 and 4 in 20.0 (pytest alone, 2026-11-25); 3 workers ran its 1,986
# tests in 30.1 min on 2026-11-30 (a fresh clone, 3,165 CPU-s), over the 25 minutes it must keep to.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 8 ? n + 1 : 8 )))
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

test-fast: setup
	$(BIN)/python -m pytest -m "not e2e and not slow" -n auto

bench: setup
	$(BIN)/solrl bench configs/bench.yaml

# Local servers for `solrl deploy` and work pools: Prefect (UI + API) and MLflow (UI + tracking, artifacts proxied),
# both on loopback, in the foreground until Ctrl-C. The MLflow store is the one `solrl train` uses without a server;
# while the server runs, solrl commands log to that store through it (flows/mlflow_server.py).
# flows/servers.py starts Prefect so that its UI calls the API on PREFECT_PORT.
PREFECT_PORT ?= 4200
MLFLOW_PORT ?= 5000
# A team's servers on PostgreSQL: SERVER_DATABASE=postgresql://USER@HOST:PORT gives Prefect its database `prefect`
# and MLflow its database `mlflow` there (create both first; the password from PGPASSWORD or ~/.pgpass; MLflow needs
# the solrl[postgres] extra): docs/operations.md. Unset: SQLite files of this checkout.
SERVER_DATABASE ?=
MLFLOW_STORE ?= $(if $(SERVER_DATABASE),$(SERVER_DATABASE)/mlflow,sqlite:///$(CURDIR)/mlruns.db)
MLFLOW_ARTIFACTS ?= $(CURDIR)/mlartifacts
# Prefect's database of `make server`: a file of this checkout, not ~/.prefect/prefect.db, which Prefect's temporary
# servers (a `solrl` command without PREFECT_API_URL) and other checkouts use. PREFECT_DB=FILE for another file (or a
# PostgreSQL URL); a database URL in PREFECT_SERVER_DATABASE_CONNECTION_URL wins over both.
PREFECT_DB ?= $(if $(SERVER_DATABASE),$(SERVER_DATABASE)/prefect,$(CURDIR)/.prefect/prefect.db)
# The address both servers bind: loopback unless told. Beyond it each requires authentication (Prefect:
# PREFECT_SERVER_API_AUTH_STRING=user:password; MLflow: MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, the
# solrl[server-auth] extra) or refuses to start; SERVER_FLAGS=--insecure starts them anyway (docs/security.md).
SERVER_HOST ?= 127.0.0.1
SERVER_FLAGS ?=
SERVER_ADDR := $(if $(filter 0.0.0.0 ::,$(SERVER_HOST)),127.0.0.1,$(SERVER_HOST))

server: setup
	@$(BIN)/python -m solrl.flows.servers prefect $(PREFECT_PORT) --database "$(PREFECT_DB)" --host $(SERVER_HOST) $(SERVER_FLAGS) & \
	prefect_pid=$$!; \
	$(BIN)/python -m solrl.flows.mlflow_server $(MLFLOW_PORT) "$(MLFLOW_STORE)" "$(MLFLOW_ARTIFACTS)" --host $(SERVER_HOST) $(SERVER_FLAGS) & \
	mlflow_pid=$$!; \
	trap 'kill $$prefect_pid $$mlflow_pid 2>/dev/null; wait' INT TERM HUP EXIT; \
	for url in http://$(SERVER_ADDR):$(PREFECT_PORT)/api/health http://$(SERVER_ADDR):$(MLFLOW_PORT)/health; do \
		until $(BIN)/python -c "import urllib.request as u; u.urlopen('$$url', timeout=2)" 2>/dev/null; do \
			kill -0 $$prefect_pid $$mlflow_pid 2>/dev/null || { echo "make server: a server exited"; exit 1; }; \
			sleep 1; \
		done; \
	done; \
	echo ""; \
	echo "Prefect UI: http://$(SERVER_ADDR):$(PREFECT_PORT)"; \
	echo "MLflow UI : http://$(SERVER_ADDR):$(MLFLOW_PORT)/#/experiments?workflowType=machine_learning"; \
	echo "Point solrl at them (in each terminal that runs solrl or a Prefect worker):"; \
	echo "  export PREFECT_API_URL=http://$(SERVER_ADDR):$(PREFECT_PORT)/api MLFLOW_TRACKING_URI=http://$(SERVER_ADDR):$(MLFLOW_PORT)"; \
	$(if $(SERVER_DATABASE),,echo "In this folder solrl logs through this MLflow server even without MLFLOW_TRACKING_URI: it serves $(MLFLOW_STORE).";) \
	echo "Existing servers instead: export PREFECT_API_URL=<their API URL> MLFLOW_TRACKING_URI=<their MLflow URI>."; \
	echo "Ctrl-C stops both servers."; \
	wait

clean-runs:
	rm -rf runs/ mlruns.db mlartifacts/
