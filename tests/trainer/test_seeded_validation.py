"""Seeded validation through the gateway and the embedded engine (tiny model): a pass over the same tasks with the
same weights and the same validation seed gives the same answers, call after call; another seed gives others. The
harness (here: this test, two chat calls a rollout, sending no seed and then a seed of its own) does not cooperate."""

from __future__ import annotations

import httpx
import pytest

from gateway.client import GatewayClient
from gateway.records import RolloutMode
from gateway.sampling import call_seed
from rollouts.feed import FeedConfig, RolloutFeed, rollout_sampling_seed
from tests.gateway.api_support import current_key
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

TASKS = [{"id": f"task-{i}", "prompt": f"Say something about the number {i}."} for i in range(1)]
GROUP_SIZE = 2


@pytest.fixture(scope="module")
def admin(tmp_path_factory, engine_url):
    gateway = InProcessGateway(tmp_path_factory.mktemp("gw-seeded") / "store.db").start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as client:
        client.register_model("policy", engine_url + "/v1", served_name="tiny")
        yield client
    gateway.stop()


def harness(base_url: str, api_key: str, prompt: str) -> list[str]:
    """Two turns at temperature 1 (the second with a seed of its own, which a seeded rollout overrides)."""
    messages, answers = [{"role": "user", "content": prompt}], []
    for extra in ({}, {"seed": 1}):
        body = {"model": "policy", "messages": messages, "max_tokens": 8, "temperature": 1.0, **extra}
        response = httpx.post(f"{base_url}/chat/completions", json=body, timeout=60,
                              headers={"authorization": f"Bearer {api_key}"})
        response.raise_for_status()
        text = response.json()["choices"][0]["message"]["content"]
        answers.append(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Go on."}]
    return answers


def validation_pass(admin: GatewayClient, prefix: str, seed: int) -> dict[str, list[str]]:
    """Every task's group created by the feed as validation does, each member run by the harness: answers by
    (task, member)."""
    feed = RolloutFeed(admin, FeedConfig(GROUP_SIZE, prefix, RolloutMode.VAL, sampling_seed=seed),
                       iter(enumerate(TASKS)))
    assert feed.submit(len(TASKS), policy_version=0) == len(TASKS)
    answers = {}
    for index, task in enumerate(TASKS):
        for member in range(GROUP_SIZE):
            rollout_id = f"{prefix}-{index}-{member}"
            key = current_key(admin, rollout_id)
            answers[f"{task['id']}/{member}"] = harness(key.base_url, key.api_key, task["prompt"])
            seeds = [call.sampling.seed for call in admin.calls(rollout_id)]
            expected = rollout_sampling_seed(seed, task["id"], member)
            assert admin.get_rollout(rollout_id).sampling_seed == expected
            assert seeds == [call_seed(expected, 0), call_seed(expected, 1)]
    return answers


def test_the_same_weights_and_seed_give_the_same_answers_and_another_seed_others(admin):
    first, again = validation_pass(admin, "val0", seed=0), validation_pass(admin, "val2", seed=0)
    assert first == again
    other = validation_pass(admin, "val0-other", seed=1)
    assert sum(first[key] != other[key] for key in first) >= len(first) - 1, (first, other)
    assert any(first[f"{task['id']}/0"] != first[f"{task['id']}/1"] for task in TASKS), "members draw apart"
