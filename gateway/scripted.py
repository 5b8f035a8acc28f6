"""A scripted upstream that answers instantly in vLLM's shapes: for the gateway benchmark and fast tests.

`python -m gateway.scripted --port 9000 --prompt-tokens 512 --response-tokens 64` serves chat and completions,
streamed or not, with token IDs and logprobs, a unique response id per call, and optional injected failures.
`--echo-request` adds the request body it received under `echo_request` to non-streamed answers (for tests of
what the gateway forwards); `--policy-version V` sets the version reported in every answer; `--tool-call NAME`
(repeatable) makes every chat answer call these tools after its text (arguments `{"step": i}`, finish reason
`tool_calls`, streamed in vLLM's tool-call deltas; with `answer_tool_results` a request ending in a tool result is
answered with text only, so an agent's episode ends). `POST /tokenize` (vLLM's, at the root) answers
`{count, tokens, max_model_len}` with `--prompt-tokens` tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
from dataclasses import dataclass

import orjson


@dataclass(frozen=True)
class Script:
    """What the scripted upstream answers."""

    prompt_tokens: int = 512
    response_tokens: int = 64
    policy_version: int = 0
    fail_first: int = 0
    fail_status: int = 503
    delay_s: float = 0.0
    echo_request: bool = False
    tool_calls: tuple[str, ...] = ()  # tools every chat answer calls, in order, after its text
    answer_tool_results: bool = False  # a chat request ending in a tool result is answered with text only
    text_finish_reason: str = "length"  # the finish reason of an answer without tool calls
    max_model_len: int = 4096  # reported by /tokenize


def _tool_call(name: str, i: int) -> dict:
    return {"id": f"chatcmpl-tool-{i}", "type": "function",
            "function": {"name": name, "arguments": f'{{"step": {i}}}'}}


def _chat_body(script: Script) -> dict:
    tokens = [{"token": f"t{i}", "logprob": -0.01 * (i + 1), "bytes": [116], "top_logprobs": []}
              for i in range(script.response_tokens)]
    message: dict = {"role": "assistant", "content": "t" * script.response_tokens}
    if script.tool_calls:
        message["tool_calls"] = [_tool_call(name, i) for i, name in enumerate(script.tool_calls)]
    return {"id": "chatcmpl-@ID@", "object": "chat.completion", "created": 0, "model": "scripted",
            "prompt_token_ids": list(range(1000, 1000 + script.prompt_tokens)),
            "choices": [{"index": 0, "message": message, "logprobs": {"content": tokens},
                         "finish_reason": "tool_calls" if script.tool_calls else script.text_finish_reason,
                         "stop_reason": None,
                         "token_ids": list(range(5000, 5000 + script.response_tokens))}],
            "usage": {"prompt_tokens": script.prompt_tokens, "completion_tokens": script.response_tokens,
                      "total_tokens": script.prompt_tokens + script.response_tokens},
            "policy_version": script.policy_version}


def chat_answer(script: Script, ident: int = 1) -> dict:
    """The non-streamed chat answer the upstream sends for `script` (its `ident`-th call)."""
    return orjson.loads(orjson.dumps(_chat_body(script)).replace(b"@ID@", str(ident).encode()))


def _completion_body(script: Script) -> dict:
    n = script.response_tokens
    return {"id": "cmpl-@ID@", "object": "text_completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "text": "t" * n, "finish_reason": "length", "stop_reason": None,
                         "prompt_token_ids": list(range(1000, 1000 + script.prompt_tokens)),
                         "token_ids": list(range(5000, 5000 + n)),
                         "logprobs": {"tokens": ["t"] * n, "token_logprobs": [-0.01 * (i + 1) for i in range(n)],
                                      "top_logprobs": [None] * n, "text_offset": list(range(n))}}],
            "usage": {"prompt_tokens": script.prompt_tokens, "completion_tokens": n,
                      "total_tokens": script.prompt_tokens + n},
            "policy_version": script.policy_version}


def _chat_stream(script: Script) -> bytes:
    first = {"id": "chatcmpl-@ID@", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
             "prompt_token_ids": list(range(1000, 1000 + script.prompt_tokens)),
             "policy_version": script.policy_version,
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    events = [first]
    for i in range(script.response_tokens):
        last = i == script.response_tokens - 1 and not script.tool_calls
        events.append({"id": "chatcmpl-@ID@", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
                       "policy_version": script.policy_version,
                       "choices": [{"index": 0, "delta": {"content": "t"}, "token_ids": [5000 + i],
                                    "logprobs": {"content": [{"token": "t", "logprob": -0.01 * (i + 1),
                                                              "bytes": [116], "top_logprobs": []}]},
                                    "finish_reason": script.text_finish_reason if last else None}]})
    events.extend(_tool_chunks(script))
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _tool_chunks(script: Script) -> list[dict]:
    """vLLM's tool-call deltas: the call's id and name with empty arguments, then the arguments in two pieces."""
    chunks = []
    for i, name in enumerate(script.tool_calls):
        arguments = _tool_call(name, i)["function"]["arguments"]
        pieces = [{"index": i, "id": f"chatcmpl-tool-{i}", "type": "function",
                   "function": {"name": name, "arguments": ""}},
                  {"index": i, "function": {"arguments": arguments[:4]}},
                  {"index": i, "function": {"arguments": arguments[4:]}}]
        chunks.extend({"id": "chatcmpl-@ID@", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
                       "policy_version": script.policy_version,
                       "choices": [{"index": 0, "delta": {"tool_calls": [piece]}, "finish_reason": None}]}
                      for piece in pieces)
    if chunks:
        chunks[-1]["choices"][0]["finish_reason"] = "tool_calls"
    return chunks


class ScriptedUpstream:
    """The server; answers count from 1 (the id placeholder becomes the count)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls = 0
        self.last_request: tuple[str, bytes] | None = None  # (path, body) of the latest request, for tests
        self._counter = itertools.count(1)
        self._bodies = {"/v1/chat/completions": orjson.dumps(_chat_body(script)),
                        "/v1/completions": orjson.dumps(_completion_body(script))}
        self._stream = _chat_stream(script)
        text_only = dataclasses.replace(script, tool_calls=())  # the answer to a tool result (answer_tool_results)
        self._text_body, self._text_stream = orjson.dumps(_chat_body(text_only)), _chat_stream(text_only)
        self._models = orjson.dumps({"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        self._tokenized = {"count": script.prompt_tokens, "tokens": list(range(1000, 1000 + script.prompt_tokens)),
                           "max_model_len": script.max_model_len}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = next((int(line.split(":", 1)[1]) for line in lines[1:]
                               if line.lower().startswith("content-length:")), 0)
                body = await reader.readexactly(length) if length else b""
                writer.write(await self._answer(method, path, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, method: str, path: str, body: bytes) -> bytes:
        n = next(self._counter)
        self.calls, self.last_request = n, (path, body)
        if self.script.delay_s:
            await asyncio.sleep(self.script.delay_s)
        if n <= self.script.fail_first:
            return _http(self.script.fail_status, b'{"error":{"message":"scripted failure","type":"server_error"}}')
        if method == "GET" and path == "/v1/models":
            return _http(200, self._models)
        if method == "POST" and path == "/tokenize":
            echo = {"echo_request": orjson.loads(body)} if self.script.echo_request else {}
            return _http(200, orjson.dumps({**self._tokenized, **echo}))
        if path not in self._bodies:
            return _http(404, b'{"error":{"message":"no such path","type":"not_found"}}')
        ident = str(n).encode()
        chat = path == "/v1/chat/completions"
        text_only = chat and self.script.answer_tool_results and _last_role(body) == "tool"
        if b'"stream":true' in body and chat:
            stream = self._text_stream if text_only else self._stream
            return _http(200, stream.replace(b"@ID@", ident), b"text/event-stream")
        answer = (self._text_body if text_only else self._bodies[path]).replace(b"@ID@", ident)
        if self.script.echo_request:
            answer = orjson.dumps({**orjson.loads(answer), "echo_request": orjson.loads(body)})
        return _http(200, answer)


def _last_role(body: bytes) -> str | None:
    messages = orjson.loads(body).get("messages") or [{}]
    return messages[-1].get("role")


def _http(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    reason = {200: b"OK", 404: b"Not Found"}.get(status, b"Error")
    return (b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
            % (status, reason, content_type, len(body)) + body)


async def serve(script: Script, host: str, port: int) -> tuple[asyncio.Server, ScriptedUpstream]:
    """Start serving; returns the asyncio server and the upstream (for its call count)."""
    upstream = ScriptedUpstream(script)
    server = await asyncio.start_server(upstream.handle, host, port, backlog=1024)
    return server, upstream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--response-tokens", type=int, default=64)
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--delay-s", type=float, default=0.0)
    parser.add_argument("--policy-version", type=int, default=0, help="Version reported in every answer.")
    parser.add_argument("--echo-request", action="store_true", help="Echo the received body under echo_request.")
    parser.add_argument("--tool-call", action="append", default=[], help="A tool every chat answer calls.")
    args = parser.parse_args()
    script = Script(args.prompt_tokens, args.response_tokens, policy_version=args.policy_version,
                    fail_first=args.fail_first, delay_s=args.delay_s, echo_request=args.echo_request,
                    tool_calls=tuple(args.tool_call))

    async def run() -> None:
        server, _ = await serve(script, args.host, args.port)
        async with server:
            await server.serve_forever()

    try:
        import uvloop
        uvloop.run(run())
    except ImportError:
        asyncio.run(run())


if __name__ == "__main__":
    main()
