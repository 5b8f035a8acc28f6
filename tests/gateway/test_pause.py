"""Pause, drain, resume against the real engine: pause returns only once in-flight calls finished, calls made while
paused are held (not rejected) and complete after resume under the new policy version."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
import torch

from gateway.client import GatewayClient
from gateway.records import RolloutSpec
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway

LONG = {"max_tokens": 160, "extra_body": {"ignore_eos": True}}


@pytest.fixture
def perturbed_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(3.0)
    model.save_pretrained(tmp_path / "ckpt")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "ckpt")
    return tmp_path / "ckpt"


def _wait(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_pause_drains_holds_and_resumes_on_the_new_policy(tmp_path, embedded_engine, engine_url, tiny_model_dir,
                                                          perturbed_checkpoint):
    gw = InProcessGateway(tmp_path / "store.db").start()
    admin = GatewayClient(gw.url, ADMIN_TOKEN)
    try:
        admin.register_model("tiny", engine_url + "/v1", version=0)
        created = admin.create_rollouts([RolloutSpec(id=f"p{i}", group_id="g") for i in range(6)])
        clients = [openai.OpenAI(base_url=c.base_url, api_key=c.api_key, max_retries=0, timeout=120) for c in created]

        def call(i: int) -> float:
            clients[i].chat.completions.create(model="tiny", messages=[{"role": "user", "content": str(i)}], **LONG)
            return time.monotonic()

        with ThreadPoolExecutor(max_workers=6) as pool:
            before = [pool.submit(call, i) for i in range(3)]
            _wait(lambda: admin.state().in_flight == 3)
            paused = admin.pause(timeout_s=120)
            pause_returned, pause_returned_wall = time.monotonic(), time.time()
            assert paused.paused and paused.drained and paused.in_flight == 0
            for i in range(3):  # answered (server side) before pause returned
                [record] = admin.calls(f"p{i}")
                assert record.created_at + record.latency_ms / 1000 <= pause_returned_wall
            assert all(f.result(timeout=10) for f in before)

            during = [pool.submit(call, i) for i in range(3, 6)]
            _wait(lambda: admin.state().held == 3)
            time.sleep(0.5)
            assert not any(f.done() for f in during), "held calls must wait, not fail or pass"
            embedded_engine.update_weights(perturbed_checkpoint, 1)
            admin.set_model_version("tiny", 1)
            resumed = admin.resume()
            assert not resumed.paused
            for future in during:
                assert future.result() > pause_returned
        versions = {c.id: admin.calls(c.id)[0].policy_version for c in created}
        assert versions == {"p0": 0, "p1": 0, "p2": 0, "p3": 1, "p4": 1, "p5": 1}
    finally:
        embedded_engine.update_weights(tiny_model_dir, 0)
        admin.close()
        gw.stop()
