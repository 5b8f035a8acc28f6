"""Engine test helpers: an OpenAI client on the shared engine and the teacher-forced reference model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def client(engine_url: str):
    """The official openai client pointed at the engine."""
    import openai

    return openai.OpenAI(base_url=f"{engine_url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def async_client(engine_url: str):
    """The official async openai client pointed at the engine."""
    import openai

    return openai.AsyncOpenAI(base_url=f"{engine_url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def reference_model(tiny_model_dir: Path) -> torch.nn.Module:
    """The served model loaded independently in the test process."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
