# syntax=docker/dockerfile:1
# The agent image with the coding CLIs: agent.Dockerfile's harnesses plus Node 20 and the pinned Claude Code and Codex
# CLIs (recipes/cli_harness/binaries.py) under /opt/harnesses, for the claude-code and codex recipes' Kubernetes Jobs.
# The controller that starts those Jobs sets HARNESSRL_CLI_DIR=/opt/harnesses too (the harness command names the
# CLI's binary there). No credentials; the CLIs' telemetry and update checks are off per rollout (launch.py).
#   docker build -f deploy/docker/agent-cli.Dockerfile -t harnessrl/agent-cli:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
ARG NODE_IMAGE=node:20.20.2-bookworm-slim
FROM ${NODE_IMAGE} AS node

FROM ${PYTHON_IMAGE}

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG MINI_SWE_AGENT_VERSION=2.4.6
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HARNESSRL_CLI_DIR=/opt/harnesses

# Node 20 and npm from the official image (Debian bookworm's nodejs is 18): npm installs the CLIs, whose native
# binaries then run without Node.
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm && node --version && npm --version

WORKDIR /opt/harnessrl
COPY deploy/constraints.txt constraints.txt
RUN pip install -c constraints.txt --index-url "${TORCH_INDEX_URL}" torch
COPY . src
RUN pip install -c constraints.txt ./src "mini-swe-agent==${MINI_SWE_AGENT_VERSION}" pytest

# The pinned CLIs, installed and checked (--version) by the project's own installer (what `make harnesses` runs),
# read-only for the harness's uid.
RUN python -m recipes.cli_harness.install /opt/harnesses && rm -rf /root/.npm && chmod -R a+rX,go-w /opt/harnesses

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /work harnessrl \
    && mkdir -p /work && chown harnessrl:harnessrl /work
USER 10001
WORKDIR /work
ENV HARNESSRL_TASK=/work/task.json
