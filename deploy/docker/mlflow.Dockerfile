# syntax=docker/dockerfile:1
# MLflow tracking server with the S3 client (artifacts on MinIO) and the bucket init step (ensure_bucket.py).
#   docker build -f deploy/docker/mlflow.Dockerfile -t harnessrl/mlflow:3.17.2 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG MLFLOW_VERSION=3.17.2
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/opt/harnessrl

WORKDIR /opt/harnessrl
COPY deploy/constraints.txt constraints.txt
RUN pip install -c constraints.txt "mlflow==${MLFLOW_VERSION}" "boto3>=1.34,<2"
COPY deploy/docker/ensure_bucket.py ensure_bucket.py

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /var/lib/mlflow mlflow \
    && mkdir -p /var/lib/mlflow && chown mlflow:mlflow /var/lib/mlflow
USER 10001
WORKDIR /var/lib/mlflow
EXPOSE 5000
CMD ["mlflow", "server", "--host", "0.0.0.0", "--port", "5000", "--backend-store-uri", "sqlite:////var/lib/mlflow/mlflow.db"]
