"""The real SmolLM2-135M-Instruct behind the gateway (slow): coherent answers, token IDs that round-trip, and the
recorded retokenization fixture that later issues build on."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from transformers import AutoTokenizer

from gateway.client import GatewayClient
from gateway.records import RolloutSpec
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess

pytestmark = pytest.mark.slow
FIXTURE = Path(__file__).parents[1] / "fixtures" / "retokenization_smollm2.json"


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    from engines.model_cache import prepare_model

    return prepare_model("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_smollm2_answers_coherently_through_the_gateway(tmp_path, smollm2_dir, tokenizer):
    from engines.embedded import EmbeddedEngine

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    with EmbeddedEngine(smollm2_dir, served_model_name="smollm2") as engine:
        config = tmp_path / "gateway.yaml"  # the greedy answer asked for is forwarded (train calls default to enforce)
        config.write_text("sampling:\n  train: record\n")
        gw = GatewayProcess(tmp_path / "store.db", config_path=config).start()
        try:
            with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
                admin.register_model("smollm2", engine.base_url + "/v1")
                created = admin.create_rollouts([RolloutSpec(id="france", group_id="g")])[0]
                client = openai.OpenAI(base_url=created.base_url, api_key=created.api_key, max_retries=0, timeout=120)
                answer = client.chat.completions.create(model="smollm2", messages=messages, temperature=0,
                                                        max_tokens=24)
                [call] = admin.calls("france")
        finally:
            gw.stop()
    text = answer.choices[0].message.content
    assert "Paris" in text, text
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tokenizer.encode(rendered, add_special_tokens=False) == call.prompt_token_ids
    assert tokenizer.decode(call.response_token_ids, skip_special_tokens=True) == text
    assert len(call.response_logprobs) == len(call.response_token_ids)


def test_retokenization_fixture_is_a_text_prefix_but_not_a_token_prefix(tokenizer):
    first, second = json.loads(FIXTURE.read_text())["calls"]
    context_ids = first["prompt_token_ids"] + first["response_token_ids"]
    assert second["prompt_token_ids"][: len(context_ids)] != context_ids
    context_text = tokenizer.decode(first["prompt_token_ids"]) + tokenizer.decode(first["response_token_ids"])
    assert tokenizer.decode(second["prompt_token_ids"]).startswith(context_text)
    # The engine re-rendered the harness's messages: the prompt IDs are the template's canonical tokens.
    rendered = tokenizer.apply_chat_template(second["request"]["messages"], tokenize=False, add_generation_prompt=True)
    assert tokenizer.encode(rendered, add_special_tokens=False) == second["prompt_token_ids"]
