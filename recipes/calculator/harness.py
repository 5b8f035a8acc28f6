"""The calculator harness: the anthropic SDK's own tool loop (`client.beta.messages.tool_runner` with a `@beta_tool`
function) over Anthropic Messages, as a user writes it; the tool runs here, in the harness.

A plain program: `python -m recipes.calculator.harness`. It reads the task from $HARNESSRL_TASK and points the SDK at
the rollout's gateway path from the harness contract (OPENAI_BASE_URL without `/v1`, since the SDK appends
`/v1/messages`; OPENAI_API_KEY, sent as `x-api-key`). The first turn forces the calculator
(`tool_choice={"type": "tool", "name": "calculator"}`), later turns leave the choice to the model (`auto`); the runner
sends the whole history each turn (`thread=False`: the gateway keeps no server-side thread); the SDK's tool runner
takes no `temperature`, so it goes in `extra_body` (the gateway enforces its own sampling on train calls). Prints the
final text.
Optional task fields: "model" (default "policy"), "max_turns" (model calls, default 4), "max_tokens" (default 64),
"temperature" (default 1.0), "force_tool" (default true: the first turn's tool_choice).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from anthropic import Anthropic, beta_tool
from anthropic.lib.tools import ToolError

from recipes.calculator.arithmetic import ExpressionError, calculate
from recipes.calculator.tasks import DEFAULT_MAX_TURNS

DEFAULT_MAX_TOKENS = 64
DEFAULT_TEMPERATURE = 1.0
TOOL_NAME = "calculator"
FORCED = {"type": "tool", "name": TOOL_NAME}
AUTO = {"type": "auto"}
SYSTEM_PROMPT = """You are a careful assistant with a calculator tool. Never compute in your head: call the \
calculator with the expression, then answer with the number it returns.

Example:
User: What is 245 * 37?
Assistant: <tool_call>
{"name": "calculator", "arguments": {"expression": "245 * 37"}}
</tool_call>
Tool: 9065
Assistant: The answer is 9065."""


@beta_tool
def calculator(expression: str) -> str:
    """Compute an arithmetic expression exactly: numbers, + - * / and parentheses.

    Args:
        expression: the arithmetic to compute, e.g. "245 * 37".
    """
    try:
        return calculate(expression)
    except ExpressionError as error:
        raise ToolError(f"cannot compute {expression!r}: {error}") from None


def load_task() -> dict[str, Any]:
    """The task JSON named by $HARNESSRL_TASK (default ./task.json)."""
    return json.loads(Path(os.environ.get("HARNESSRL_TASK", "task.json")).read_text())


def client_from_contract(env: Mapping[str, str]) -> Anthropic:
    """The SDK pointed at the rollout's gateway path (the contract's OPENAI_BASE_URL without `/v1`) with its key."""
    missing = [name for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY") if not env.get(name)]
    if missing:
        raise KeyError(f"{', '.join(missing)} not set: the harness contract (controller/recipe.py) gives a harness "
                       "its rollout's gateway URL and key")
    base_url = env["OPENAI_BASE_URL"].rstrip("/")
    if not base_url.endswith("/v1"):
        raise ValueError(f"OPENAI_BASE_URL {base_url!r} does not end in /v1; the gateway's rollout URLs are "
                         "{gateway}/r/{rollout id}/v1")
    return Anthropic(base_url=base_url.removesuffix("/v1"), api_key=env["OPENAI_API_KEY"])


def run_episode(client: Anthropic, task: Mapping[str, Any]) -> str:
    """The tool runner to its end: the text of the model's last message ('' when it had none)."""
    runner = client.beta.messages.tool_runner(
        model=task.get("model", "policy"), system=SYSTEM_PROMPT, tools=[calculator],
        messages=[{"role": "user", "content": task["question"]}],
        tool_choice=FORCED if task.get("force_tool", True) else AUTO,
        max_iterations=int(task.get("max_turns", DEFAULT_MAX_TURNS)),
        max_tokens=int(task.get("max_tokens", DEFAULT_MAX_TOKENS)),
        extra_body={"temperature": float(task.get("temperature", DEFAULT_TEMPERATURE))}, thread=False)
    last = None
    for message in runner:
        last = message
        runner.set_messages_params(lambda params: {**params, "tool_choice": AUTO})  # forced on the first turn only
    if last is None:
        return ""
    return "".join(block.text for block in last.content if block.type == "text")


def main() -> int:
    task = load_task()
    print(run_episode(client_from_contract(os.environ), task))
    return 0


if __name__ == "__main__":
    sys.exit(main())
