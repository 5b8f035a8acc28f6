# syntax=docker/dockerfile:1
# The trainer image: torch backend, embedded engine, Prefect worker and MLflow client (flows run here).
# CPU (default) or CUDA torch wheels, same torch version (deploy/constraints.txt):
#   docker build -f deploy/docker/trainer.Dockerfile -t harnessrl/trainer:0.1.0 .
#   docker build -f deploy/docker/trainer.Dockerfile --build-arg TORCH_VARIANT=cu128 --build-arg EXTRAS=gpu \
#     -t harnessrl/trainer:0.1.0-cu128 .
# CUDA wheels carry their CUDA runtime; the node provides only the driver. EXTRAS=gpu adds vLLM and verl, whose
# releases must accept the pinned torch.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG TORCH_VARIANT=cpu
ARG EXTRAS=k8s
ARG PREFECT_VERSION=3.9.1
ARG MLFLOW_VERSION=3.17.2
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    HARNESSRL_MODELS_DIR=/var/lib/harnessrl/models

WORKDIR /opt/harnessrl
COPY deploy/constraints.txt constraints.txt
RUN pip install -c constraints.txt --index-url "https://download.pytorch.org/whl/${TORCH_VARIANT}" torch
COPY . src
RUN pip install -c constraints.txt "./src[${EXTRAS}]" "prefect==${PREFECT_VERSION}" "mlflow==${MLFLOW_VERSION}" \
    "boto3>=1.34,<2"

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /var/lib/harnessrl harnessrl \
    && mkdir -p /var/lib/harnessrl/models && chown -R harnessrl:harnessrl /var/lib/harnessrl
USER 10001
WORKDIR /var/lib/harnessrl
EXPOSE 8001
CMD ["prefect", "worker", "start", "--pool", "harnessrl-process", "--type", "process"]
