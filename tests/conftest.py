"""Session fixtures shared by every test folder: the tiny model, an embedded engine serving it, a moto S3 server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

TINY_SERVED_NAME = "tiny"


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny random Llama, prepared once into the provisioning cache ($HARNESSRL_MODELS_DIR)."""
    from harnessrl.models import prepare_model

    return prepare_model("tiny")


@pytest.fixture(scope="session")
def embedded_engine(tiny_model_dir: Path) -> Iterator[object]:
    """A real engine server subprocess serving the tiny model as `tiny` on a free port."""
    from trainer.engines.embedded import EmbeddedEngine

    engine = EmbeddedEngine(tiny_model_dir, served_model_name=TINY_SERVED_NAME, max_batch_size=16)
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="session")
def engine_url(embedded_engine) -> str:
    """Root URL of the running engine (its OpenAI base URL is engine_url + '/v1')."""
    return embedded_engine.base_url


@pytest.fixture(scope="session")
def s3_endpoint():
    """A moto S3 server (the S3 REST API) in this process on a free port; returns its S3Endpoint."""
    from moto.server import ThreadedMotoServer

    from trainer.checkpoint_store import S3Endpoint

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield S3Endpoint(f"127.0.0.1:{port}", access_key="test", secret_key="test", secure=False)
    server.stop()
