# syntax=docker/dockerfile:1
# The agent image: the recipes' harnesses (instruction following, search, SWE with mini-swe-agent), run as one
# Kubernetes Job per rollout. It holds no credentials: the rollout key arrives per Job from a Secret.
#   docker build -f deploy/docker/agent.Dockerfile -t harnessrl/agent:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG MINI_SWE_AGENT_VERSION=2.4.6
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True

WORKDIR /opt/harnessrl
COPY deploy/constraints.txt constraints.txt
RUN pip install -c constraints.txt --index-url "${TORCH_INDEX_URL}" torch
COPY . src
# pytest: the swe recipe's grading Jobs run the task's tests in this image (recipes/swe/grading_job.py).
RUN pip install -c constraints.txt ./src "mini-swe-agent==${MINI_SWE_AGENT_VERSION}" pytest

# No git in this image on purpose (the SWE sandbox disables it anyway); the working directory is an emptyDir.
RUN useradd --uid 10001 --user-group --no-create-home --home-dir /work harnessrl \
    && mkdir -p /work && chown harnessrl:harnessrl /work
USER 10001
WORKDIR /work
ENV HARNESSRL_TASK=/work/task.json
