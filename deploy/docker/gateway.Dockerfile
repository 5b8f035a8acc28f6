# syntax=docker/dockerfile:1
# The gateway + controller image: `harnessrl gateway serve` and `harnessrl controller run` (graders run here too).
# Build from the repository root:
#   docker build -f deploy/docker/gateway.Dockerfile -t harnessrl/gateway:0.1.0 .
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
FROM ${PYTHON_IMAGE}

# torch is a core dependency of the project; the CPU wheel keeps this image small (the gateway never runs a model).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/harnessrl
COPY deploy/constraints.txt constraints.txt
RUN pip install -c constraints.txt --index-url "${TORCH_INDEX_URL}" torch
COPY . src
# k8s: the controller's Kubernetes client; psycopg: the gateway's Postgres store (overlays/postgres).
RUN pip install -c constraints.txt "./src[k8s]" "psycopg[binary]>=3.2,<4"

RUN useradd --uid 10001 --user-group --no-create-home --home-dir /var/lib/harnessrl harnessrl \
    && mkdir -p /var/lib/harnessrl && chown harnessrl:harnessrl /var/lib/harnessrl
USER 10001
WORKDIR /var/lib/harnessrl
EXPOSE 8100
ENTRYPOINT ["harnessrl"]
CMD ["gateway", "serve", "--host", "0.0.0.0"]
