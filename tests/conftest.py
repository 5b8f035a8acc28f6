"""Session fixtures shared by every test folder: the tiny model and a running embedded engine serving it."""

from __future__ import annotations

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
