# solrl — the two ways in: `make demo` and `make test`. Both set up what is missing first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.solrl-installed-$(shell cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)

.PHONY: setup demo test bench clean-runs help

help:
	@echo "make demo   - set up, then train the embedded default with configs/demo.yaml into runs/demo/"
	@echo "make test   - set up, then run the test suite"
	@echo "make bench  - set up, then run the four families side by side (~45 min on 2 cores) -> runs/bench/report.md"
	@echo "make setup  - create $(VENV) and install solrl with pinned dependencies (constraints.txt)"

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=26"
	$(BIN)/python -m pip install --quiet -c constraints.txt --build-constraint constraints.txt -e '.[test]'
	rm -f $(VENV)/.solrl-installed-*
	touch $@

setup: $(STAMP)

demo: setup
	$(BIN)/solrl train configs/demo.yaml --run-dir runs/demo

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/solrl bench configs/bench.yaml

clean-runs:
	rm -rf runs/ mlruns.db mlartifacts/
