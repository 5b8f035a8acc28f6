"""Weight management on the real server: sleep queues requests, wake-up serves them, update_weights swaps."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch

from tests.engine.support import assert_teacher_forced

PROMPT = [1, 504, 2116, 4193, 17423]


def complete(client, max_tokens: int = 4):
    return client.completions.with_raw_response.create(
        model="tiny", prompt=PROMPT, max_tokens=max_tokens, temperature=0, logprobs=0,
        extra_body={"return_token_ids": True})


@pytest.fixture(scope="module")
def perturbed_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the served architecture with different weights."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(5.0)
    path = tmp_path_factory.mktemp("checkpoint") / "step-7"
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(path)
    return path


@pytest.fixture()
def restore_weights(embedded_engine, tiny_model_dir: Path):
    """Puts the original weights (version 0) back and wakes the engine after the test."""
    yield
    embedded_engine.wake_up()
    embedded_engine.update_weights(tiny_model_dir, 0)


def test_sleep_queues_requests_until_wake_up(embedded_engine, client, restore_weights) -> None:
    embedded_engine.sleep()
    assert embedded_engine.health()["asleep"] is True
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(complete, client)
        time.sleep(1.0)
        assert not waiting.done(), "a request must wait while the engine sleeps"
        embedded_engine.wake_up()
        answer = waiting.result(timeout=30).parse()
    assert len(answer.choices[0].model_extra["token_ids"]) == 4
    assert embedded_engine.health()["asleep"] is False


def test_sleep_returns_after_in_flight_generation_finished(embedded_engine, client, restore_weights) -> None:
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(complete, client, 300)
        while embedded_engine.health()["running_rows"] == 0 and not running.done():
            time.sleep(0.01)
        embedded_engine.sleep()
        assert running.done(), "sleep must wait for the running batch"
        assert len(running.result().parse().choices[0].model_extra["token_ids"]) == 300


def test_update_weights_changes_logprobs_and_policy_version(embedded_engine, client, perturbed_dir: Path,
                                                            restore_weights) -> None:
    from transformers import AutoModelForCausalLM

    before = complete(client).parse().choices[0].logprobs.token_logprobs
    embedded_engine.update_weights(perturbed_dir, 7)
    raw = complete(client)
    after = raw.parse()
    assert raw.headers["x-policy-version"] == "7" and after.model_extra["policy_version"] == 7
    assert embedded_engine.health()["policy_version"] == 7
    choice = after.choices[0]
    assert choice.logprobs.token_logprobs != before
    new_model = AutoModelForCausalLM.from_pretrained(perturbed_dir).eval()
    assert_teacher_forced(new_model, PROMPT, choice.model_extra["token_ids"], choice.logprobs.token_logprobs)


def test_update_while_asleep_applies_at_wake_up(embedded_engine, client, perturbed_dir: Path,
                                                restore_weights) -> None:
    embedded_engine.sleep()
    embedded_engine.update_weights(perturbed_dir, 8)
    health = embedded_engine.health()
    assert health["asleep"] is True and health["policy_version"] == 8
    embedded_engine.wake_up()
    assert complete(client).parse().model_extra["policy_version"] == 8


def test_bad_checkpoints_are_refused(engine_url: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    missing = httpx.post(f"{engine_url}/update_weights", json={"path": str(tmp_path / "nope"), "version": 1})
    assert missing.status_code == 400 and "is not a directory" in missing.json()["error"]["message"]
    from transformers import LlamaConfig, LlamaForCausalLM

    other = tmp_path / "other"
    LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(other)
    mismatch = httpx.post(f"{engine_url}/update_weights", json={"path": str(other), "version": 1})
    assert mismatch.status_code == 400
    assert "hidden_size=32" in mismatch.json()["error"]["message"]
    assert httpx.get(f"{engine_url}/health").json()["policy_version"] == 0
