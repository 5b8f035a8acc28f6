"""The OpenAI Agents SDK (`openai-agents`), unmodified, with its default model (OpenAI Responses) through the gateway
in front of the scripted upstream: an agent with two function tools runs its episode end to end (the model calls
both tools in parallel, the SDK runs them and sends their outputs, the model answers), streamed and not; and once
in front of the real embedded engine (tiny model, integration tier): each recorded call holds the engine's tokens.

The SDK (top-level package `agents`) is a dev dependency of the project venv (pyproject.toml; the recipes are the
package `recipes`, so nothing shadows it); the agent runs as a subprocess of that venv's Python, in isolated mode
outside the project folder; only the environment variables of the SDK's documentation point it at the gateway
(`OPENAI_BASE_URL`, `OPENAI_API_KEY`; tracing export off). Without the SDK installed the test is skipped, unless
`HARNESSRL_REQUIRE_AGENTS_SDK=1` (`make test`) makes that a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway.client import GatewayClient
from gateway.scripted import Script
from tests.gateway.api_support import create_rollouts
from tests.gateway.support import ADMIN_TOKEN
from tests.inprocess import InProcessGateway, InProcessScripted

REPO = Path(__file__).resolve().parents[2]
PROMPT_TOKENS, RESPONSE_TOKENS = 10, 5

AGENT = '''
import asyncio, json, sys
from agents import Agent, Runner, function_tool, set_tracing_disabled

set_tracing_disabled(True)
ran = []

@function_tool
def read_file(step: int) -> str:
    """Read the file of one step."""
    ran.append(["read_file", step])
    return f"contents of step {step}"

@function_tool
def run(step: int) -> str:
    """Run the tests of one step."""
    ran.append(["run", step])
    return "1 passed"

agent = Agent(name="fixer", instructions="You fix bugs.", tools=[read_file, run], model="policy")

async def episode(stream, chained=False):
    ran.clear()
    if stream:
        result = Runner.run_streamed(agent, "fix a.py", max_turns=4)
        kinds = [event.type async for event in result.stream_events()]
        assert "raw_response_event" in kinds, kinds
    else:
        result = await Runner.run(agent, "fix a.py", max_turns=4, auto_previous_response_id=chained)
    ids = [response.response_id for response in result.raw_responses]
    return {"final": result.final_output, "ran": list(ran), "response_ids": ids}

async def main():
    print(json.dumps([await episode(stream=False), await episode(stream=True),
                      await episode(stream=False, chained=True)]))

asyncio.run(main())
'''


def sdk_python() -> Path:
    """The project venv's Python, once it holds the SDK (`openai-agents`, a dev dependency)."""
    if importlib.util.find_spec("agents") is not None:
        return Path(sys.executable)
    missing = (f"the OpenAI Agents SDK (openai-agents) is not installed in {sys.prefix}; install the dev extras: "
               "pip install -e '.[dev]' (or `make test`)")
    if os.environ.get("HARNESSRL_REQUIRE_AGENTS_SDK") == "1":
        pytest.fail(missing)
    pytest.skip(missing)


@pytest.fixture(scope="module")
def gateway_admin(tmp_path_factory):
    scripted = InProcessScripted(Script(prompt_tokens=PROMPT_TOKENS, response_tokens=RESPONSE_TOKENS,
                                        tool_calls=("read_file", "run"), answer_tool_results=True,
                                        text_finish_reason="stop")).start()
    gw = InProcessGateway(db_url=f"sqlite:///{tmp_path_factory.mktemp('gw') / 'store.db'}").start()
    with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
        admin.register_model("policy", scripted.base_url, version=2)
        yield admin, scripted
    gw.stop()
    scripted.stop()


@pytest.mark.slow
def test_an_agent_runs_its_function_tools_end_to_end(gateway_admin, tmp_path):
    admin, scripted = gateway_admin
    """Three episodes in one SDK process (its import takes seconds): `Runner.run`, `Runner.run_streamed`, and
    `Runner.run` chaining its calls by `previous_response_id` (served from the rollout's recorded calls)."""
    python = sdk_python()
    (created,) = create_rollouts(admin)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "OPENAI_BASE_URL": created.base_url,
           "OPENAI_API_KEY": created.api_key, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    done = subprocess.run([str(python), "-I", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    episodes = json.loads(done.stdout.strip().splitlines()[-1])
    calls = admin.calls(created.id)
    assert [(c.kind, c.stream, c.status) for c in calls] == [("responses", stream, "ok") for stream in
                                                              (False, False, True, True, False, False)]
    for episode, (first, second) in zip(episodes, (calls[:2], calls[2:4], calls[4:]), strict=True):
        # the SDK runs one response's function calls concurrently: both ran once, in either order
        assert sorted(episode["ran"]) == [["read_file", 0], ["run", 1]]
        assert episode["final"] == "t" * RESPONSE_TOKENS
        assert [first.response_id, second.response_id] == episode["response_ids"]
        for call in (first, second):
            assert call.prompt_token_ids == list(range(1000, 1000 + PROMPT_TOKENS))
            assert call.response_token_ids == list(range(5000, 5000 + RESPONSE_TOKENS))
        assert first.request["input"] == [{"role": "user", "content": "fix a.py"}]
        outputs = {item["call_id"]: item["output"] for item in second.request["input"]
                   if item.get("type") == "function_call_output"}
        assert sorted(outputs.values()) == ["1 passed", "contents of step 0"]
    chained = calls[5].request
    assert chained["previous_response_id"] == calls[4].response_id
    assert {item.get("type") for item in chained["input"]} == {"function_call_output"}  # the rest from the record
    sent = orjson.loads(scripted.upstream.last_request[1])["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert [c["function"]["name"] for c in sent[2]["tool_calls"]] == ["read_file", "run"]


def test_the_sdk_and_the_projects_recipes_import_side_by_side():
    """In one venv, wherever it runs from: `agents` is the SDK (installed), `recipes` the project's package."""
    python = sdk_python()
    code = "import agents, recipes.swe.recipe, recipes; print(agents.__file__); print(recipes.__file__)"
    done = subprocess.run([str(python), "-c", code], cwd="/", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    sdk, ours = (Path(line) for line in done.stdout.split())
    assert "site-packages" in sdk.parts and (sdk.parent / "run.py").is_file()
    assert ours.parent == REPO / "recipes"


ENGINE_AGENT = '''
import asyncio, json
from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.exceptions import ModelBehaviorError

set_tracing_disabled(True)

@function_tool
def read_file(path: str) -> str:
    """Read one file of the repository."""
    return "x = 1"

agent = Agent(name="reader", instructions="You read code.", tools=[read_file], model="policy",
              model_settings=ModelSettings(max_tokens=8))

async def main():
    try:
        result = await Runner.run(agent, "What is in a.py?", max_turns=3)
    except ModelBehaviorError as exc:  # a random model's answer cut at max_tokens: the SDK ends the run on it
        assert "max_output_tokens" in str(exc), exc
        print(json.dumps({"final": None, "incomplete": True}))
        return
    print(json.dumps({"final": result.final_output, "turns": len(result.raw_responses)}))

asyncio.run(main())
'''


def test_an_agent_runs_in_front_of_the_embedded_engine(engine_url, tiny_model_dir, tmp_path):
    """The same SDK, its default Responses model, in front of the real engine (tiny random model, fallback tool
    template): the episode ends, and each recorded call holds the engine's tokens of the rendered conversation."""
    from transformers import AutoTokenizer

    python = sdk_python()
    gw = InProcessGateway(db_url=f"sqlite:///{tmp_path / 'store.db'}").start()
    try:
        with GatewayClient(gw.url, ADMIN_TOKEN) as admin:
            admin.register_model("policy", engine_url + "/v1", served_name="tiny")
            (created,) = create_rollouts(admin)
            script = tmp_path / "agent.py"
            script.write_text(ENGINE_AGENT)
            env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "OPENAI_BASE_URL": created.base_url,
                   "OPENAI_API_KEY": created.api_key, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
            done = subprocess.run([str(python), "-I", str(script)], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=180)
            assert done.returncode == 0, done.stderr[-3000:]
            result = json.loads(done.stdout.strip().splitlines()[-1])
            calls = admin.calls(created.id)
    finally:
        gw.stop()
    assert len(calls) >= 1
    if result.get("incomplete"):
        assert calls[-1].finish_reason == "length" and '"status":"incomplete"' in calls[-1].response_raw
    else:
        assert len(calls) == result["turns"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for call in calls:
        assert call.kind == "responses" and call.status == "ok" and call.policy_version == 0
        prompt = tokenizer.decode(call.prompt_token_ids)
        assert "You read code." in prompt and "What is in a.py?" in prompt and '"read_file"' in prompt
        assert 0 < len(call.response_token_ids) == len(call.response_logprobs) <= 8
    if result["final"] is not None:
        last = calls[-1]
        assert tokenizer.decode(last.response_token_ids, skip_special_tokens=True).strip() == result["final"].strip()
