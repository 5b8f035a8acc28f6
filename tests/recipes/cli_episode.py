"""A scripted chat-completions upstream that plays one tool-using SWE episode for a real coding CLI behind the gateway.

It answers `/v1/chat/completions` in vLLM's shapes (streamed or not, `prompt_token_ids`, per-choice `token_ids` and
logprobs, `tool_calls` in OpenAI's format, `policy_version`) and `/tokenize`. The answer is chosen by how far the
episode is: the number of `tool` messages in the request (the CLI's tool results, translated by the gateway) picks the
next step of the script (read the file, edit it, run the tests), and after the last step it answers a closing text.
A request without the episode's tools (a CLI's side call) gets a short text. Each CLI gets steps in its own tools:
Claude Code `Read`/`Edit`/`Bash`, Codex `exec_command` with `cmd` and its free-form `apply_patch` (offered by the
gateway as a function of one string argument `input`).

Token IDs are those of a real engine's: the conversation rendered as ChatML with Hermes tool calls (`render`: tools,
then each message; a tool call's arguments as parsed JSON in `json.dumps` spacing, as HF's `tojson` writes them), one
token per character and `<|im_end|>` one token (`IM_END`), and the answer is the rendering of its assistant turn
closed by `IM_END`. So a conversation re-sent as it was answered renders to a prompt that extends the earlier call's
prompt and answer (one sample), and one re-sent otherwise does not. A request with vLLM's
`kv_transfer_params.prompt_token_ids` is answered on those prompt tokens, as vLLM does. A request whose `tool_choice`
names a function gets that call's opening at the end of its prompt, reported as `tool_choice_forced_tokens` (the
embedded engine's forcing); a step's `after` text is written after its call, and cut at the request's `max_tokens`
(finish reason `length`, no `<|im_end|>`) where it would pass it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FINAL_TEXT = "The bug is fixed and the tests pass."
SIDE_TEXT = "Fix a bug"


@dataclass(frozen=True)
class ToolStep:
    """One assistant turn that calls a tool."""

    name: str
    arguments: dict[str, Any]
    after: str | None = None
    """Text the model writes after the call (generated in that order; the message carries it as its content)."""


def fix_of(bug_patch: str) -> tuple[str, str]:
    """(buggy text, fixed text) of a one-hunk SWE-smith bug patch: the hunk's lines with its `+` lines (what the
    buggy file holds) and with its `-` lines instead (the original)."""
    buggy, fixed = [], []
    hunk = bug_patch.split("\n@@", 1)[1].split("\n", 1)[1]
    for line in hunk.splitlines():
        if line.startswith("+"):
            buggy.append(line[1:])
        elif line.startswith("-"):
            fixed.append(line[1:])
        else:
            buggy.append(line[1:])
            fixed.append(line[1:])
    return "\n".join(buggy).strip("\n"), "\n".join(fixed).strip("\n")


def bug_file(bug_patch: str) -> str:
    """The path the bug patch changes (`+++ b/PATH`)."""
    return next(line[6:] for line in bug_patch.splitlines() if line.startswith("+++ b/"))


def claude_code_steps(repo: Path, bug_patch: str) -> list[ToolStep]:
    """Read the file, edit it back, run the tests: in Claude Code's own tools (absolute paths, as they require)."""
    path, (buggy, fixed) = str(repo / bug_file(bug_patch)), fix_of(bug_patch)
    return [ToolStep("Read", {"file_path": path}),
            ToolStep("Edit", {"file_path": path, "old_string": buggy, "new_string": fixed}),
            ToolStep("Bash", {"command": "python -m pytest -q", "description": "Run the tests"})]


def codex_patch(bug_patch: str) -> str:
    """The fix as Codex's `apply_patch` input (its own patch format: the buggy lines out, the fixed ones in)."""
    path, (buggy, fixed) = bug_file(bug_patch), fix_of(bug_patch)
    lines = [f"-{line}" for line in buggy.splitlines()] + [f"+{line}" for line in fixed.splitlines()]
    return "\n".join(["*** Begin Patch", f"*** Update File: {path}", "@@", *lines, "*** End Patch", ""])


def codex_steps(bug_patch: str) -> list[ToolStep]:
    """The same episode in Codex's tools: `exec_command` to read and test, its free-form `apply_patch` to edit."""
    path = bug_file(bug_patch)
    return [ToolStep("exec_command", {"cmd": f"cat {path}"}),
            ToolStep("apply_patch", {"input": codex_patch(bug_patch)}),
            ToolStep("exec_command", {"cmd": "python -m pytest -q"})]


IM_END = 2  # `<|im_end|>`, one token; every other character is a token of its own (`encode`)


def encode(text: str) -> list[int]:
    """One token per character (code point + 10)."""
    return [ord(ch) + 10 for ch in text]


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _call_text(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except json.JSONDecodeError:
        arguments = function.get("arguments")
    return "<tool_call>\n" + json.dumps({"name": function.get("name"), "arguments": arguments}) + "\n</tool_call>"


def turn_body(message: dict[str, Any]) -> list[int]:
    """An assistant (or any) message's rendered body: its text, then each tool call as a Hermes block."""
    parts = [_content(message)] if _content(message) else []
    parts += [_call_text(call) for call in message.get("tool_calls") or []]
    return encode("\n".join(parts))


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
           add_generation_prompt: bool = True) -> list[int]:
    """The prompt tokens of a chat request: the tools in a system turn, each message a turn, the assistant header."""
    ids = encode("<|im_start|>system\n# Tools\n" + "\n".join(json.dumps(t) for t in tools)) + [IM_END] + encode("\n") \
        if tools else []
    for message in messages:
        ids += encode(f"<|im_start|>{message.get('role')}\n") + turn_body(message) + [IM_END] + encode("\n")
    return ids + encode("<|im_start|>assistant\n") if add_generation_prompt else ids


@dataclass
class Episode:
    """The script and what was asked of it."""

    steps: list[ToolStep]
    requests: list[dict[str, Any]] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)  # "step N", "final" or "side", per request

    def answer(self, request: dict[str, Any]) -> tuple[str | None, list[ToolStep], str]:
        """(text, tool calls, finish reason) for one chat request."""
        offered = {tool.get("function", {}).get("name") for tool in request.get("tools") or []}
        if not {step.name for step in self.steps} <= offered:
            self.answered.append("side")
            return SIDE_TEXT, [], "stop"
        done = sum(1 for message in request.get("messages", []) if message.get("role") == "tool")
        if done < len(self.steps):
            self.answered.append(f"step {done}")
            return self.steps[done].after, [self.steps[done]], "tool_calls"
        self.answered.append("final")
        return FINAL_TEXT, [], "stop"


def _logprobs(ids: list[int]) -> dict[str, Any]:
    return {"content": [{"token": f"t{i}", "logprob": -0.5, "bytes": [116], "top_logprobs": []} for i in ids]}


def _tool_call(step: ToolStep, index: int, call_id: str) -> dict[str, Any]:
    return {"index": index, "id": call_id, "type": "function",
            "function": {"name": step.name, "arguments": json.dumps(step.arguments)}}


def prompt_ids(request: dict[str, Any]) -> list[int]:
    """The request's prompt tokens: vLLM's `kv_transfer_params.prompt_token_ids` when given, else its rendering."""
    given = (request.get("kv_transfer_params") or {}).get("prompt_token_ids")
    return list(given) if given else render(request.get("messages", []), request.get("tools"))


def forced_opening(request: dict[str, Any]) -> list[int]:
    """The opening of a call to the function `tool_choice` names, as the embedded engine forces it: at the end of the
    prompt, reported as prompt tokens (`tool_choice_forced_tokens`); none for any other `tool_choice`."""
    choice = request.get("tool_choice")
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    return encode('<tool_call>\n{"name": ' + json.dumps(name) + ', "arguments": ') if name else []


def chat_answer(number: int, request: dict[str, Any], text: str | None, calls: list[ToolStep],
                finish: str) -> dict[str, Any]:
    """The unary chat completion (vLLM's shape, token IDs and logprobs included); a forced call's opening is the
    prompt's, as the embedded engine reports it."""
    tool_calls = [_tool_call(step, i, f"call_{number}_{i}") for i, step in enumerate(calls)]
    ids = turn_body({"content": text, "tool_calls": tool_calls}) + [IM_END]
    if any(step.after for step in calls):  # generated as the calls, then the text
        ids = encode("\n".join([*(_call_text(call) for call in tool_calls), text or ""])) + [IM_END]
    forced = forced_opening(request)
    forced = forced if ids[:len(forced)] == forced else []
    prompt, ids = prompt_ids(request) + forced, ids[len(forced):]
    limit = request.get("max_completion_tokens") or request.get("max_tokens")
    if limit and len(ids) > limit and any(step.after for step in calls):  # cut inside the text after the calls
        ids, finish = ids[:limit], "length"
        called = len(encode("\n".join(_call_text(call) for call in tool_calls) + "\n")) - len(forced)
        assert limit > called, f"max_tokens {limit} would cut the scripted calls ({called} tokens): not scripted"
        text = "".join(chr(token - 10) for token in ids[called:])
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [{k: v for k, v in call.items() if k != "index"} for call in tool_calls]
    return {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0, "model": request.get("model"),
            "prompt_token_ids": prompt, "policy_version": 0,
            **({"tool_choice_forced_tokens": len(forced)} if forced else {}),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "stop_reason": None,
                         "token_ids": ids, "logprobs": _logprobs(ids)}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                      "total_tokens": len(prompt) + len(ids)}}


def chat_stream(answer: dict[str, Any]) -> bytes:
    """The same answer as vLLM streams it: a role chunk with the prompt IDs, the content or each tool call as a
    chunk of its own with its token IDs, then the finish reason."""
    choice = answer["choices"][0]
    head = {"id": answer["id"], "object": "chat.completion.chunk", "created": 0, "model": answer["model"],
            "policy_version": 0}
    ids, message = choice["token_ids"], choice["message"]
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"content": message["content"]})
    parts += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(message.get("tool_calls", []))]
    cut = [len(ids) * k // len(parts) for k in range(len(parts) + 1)]
    chunks = [{**head, "prompt_token_ids": answer["prompt_token_ids"],
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    for k, delta in enumerate(parts):
        piece = ids[cut[k]:cut[k + 1]]
        chunks.append({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None, "token_ids": piece,
                                            "logprobs": _logprobs(piece)}]})
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"],
                                        "token_ids": [], "logprobs": {"content": []}}]})
    return b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"


class EpisodeUpstream:
    """The upstream on a loopback port, on a thread of the test process."""

    def __init__(self, episode: Episode) -> None:
        self.episode = episode
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path.endswith("/tokenize"):
                    ids = encode(request.get("prompt", "")) if "messages" not in request else \
                        render(request["messages"], request.get("tools"), request.get("add_generation_prompt", True))
                    self._send(200, json.dumps({"count": len(ids), "tokens": ids, "max_model_len": 65536}).encode())
                    return
                with lock:
                    outer.episode.requests.append(request)
                    number = len(outer.episode.requests)
                    answer = chat_answer(number, request, *outer.episode.answer(request))
                if request.get("stream"):
                    self._send(200, chat_stream(answer), "text/event-stream")
                else:
                    self._send(200, json.dumps(answer).encode())

            def do_GET(self) -> None:  # noqa: N802
                models = {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
                self._send(200, json.dumps(models).encode())

            def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="episode-upstream", daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
