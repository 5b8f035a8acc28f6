"""A scripted chat upstream whose answers a test writes as a function of the request: the calculator harness's
episodes through the real gateway without a model. Served from a thread of the test process on loopback, in vLLM's
non-streamed shape (token IDs and logprobs from `gateway.scripted`), every request kept for the test to read."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.scripted import Script, chat_answer
from tests.gateway.support import free_port
from tests.loopback_server import LoopbackServer

Reply = dict[str, Any]  # the answer's assistant message: {"content": str} and optionally {"tool_calls": [...]}
Policy = Callable[[dict[str, Any]], Reply]  # chat request body -> the assistant message


def tool_call(expression: Any, name: str = "calculator") -> Reply:
    """An assistant message that calls `name` with `{"expression": expression}`."""
    arguments = orjson.dumps({"expression": expression}).decode()
    return {"content": "", "tool_calls": [{"id": "call-1", "type": "function",
                                           "function": {"name": name, "arguments": arguments}}]}


def question_expression(body: dict[str, Any]) -> str:
    """The expression of the task's question ("What is 317 * 46?") in the request's user message."""
    user = next(m for m in body["messages"] if m["role"] == "user")
    match = re.search(r"What is (.+)\?", str(user["content"]))
    assert match, f"no question in {user['content']!r}"
    return match.group(1)


def last_tool_result(body: dict[str, Any]) -> str | None:
    """The content of the request's last message when it is a tool result, else None."""
    last = body["messages"][-1]
    return str(last["content"]) if last["role"] == "tool" else None


def solver(body: dict[str, Any]) -> Reply:
    """Calls the calculator with the question's expression, then states the tool's result."""
    result = last_tool_result(body)
    if result is None:
        return tool_call(question_expression(body))
    return {"content": f"The answer is {result}."}


@dataclass
class ScriptedModel(LoopbackServer):
    """Answers every chat request with `policy(request)`; `requests` holds each request body received."""

    policy: Policy
    port: int = field(default_factory=free_port)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._init_server("scripted-model")

    def answer(self, body: dict[str, Any]) -> bytes:
        """The vLLM-shaped answer to one chat request."""
        self.requests.append(body)
        reply = self.policy(body)
        answer = chat_answer(Script(prompt_tokens=16, response_tokens=8), ident=len(self.requests))
        choice = answer["choices"][0]
        choice["message"] = {"role": "assistant", **reply}
        choice["finish_reason"] = "tool_calls" if reply.get("tool_calls") else "stop"
        return orjson.dumps(answer)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = orjson.loads(await reader.readexactly(length)) if length else {}
                payload = self.answer(body) if head.startswith(b"POST /v1/chat/completions") else b"{}"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                             % len(payload) + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
