"""One streamed chat-completions answer translated to OpenAI Responses SSE events, chunk by chunk.

Events, each `event: TYPE` + `data: JSON` with a `sequence_number` from 0: `response.created` and
`response.in_progress` on the first chunk; per text item `response.output_item.added`, `response.content_part.added`,
`response.output_text.delta`..., `response.output_text.done`, `response.content_part.done`,
`response.output_item.done`; per tool call `response.output_item.added`, `response.function_call_arguments.delta`...,
`response.function_call_arguments.done`, `response.output_item.done` (a custom tool's call: its `custom_tool_call`
item with `response.custom_tool_call_input.delta` / `.done`); last `response.completed` (or
`response.incomplete` when the engine stopped on length), or on an error `error` then `response.failed`.
Text streams as it comes until the first tool call; from there on the answer is held and its items go out at the end
(each call whole: one arguments delta), so tool-call deltas in any order of their `index` (chat allows interleaving)
make complete items: no answer of the model's fails here. One item is open at a time.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.capture import ProtocolError
from gateway.protocols.base import ModelFault
from gateway.protocols.responses_answer import (
    custom_input,
    message_item,
    skeleton,
    status_of,
    text_part,
    tool_call_item,
    usage,
)
from gateway.protocols.responses_request import custom_tool_names, tool_namespaces


class ResponsesStream:
    """The StreamTranslator of one streamed answer to `body` (first choice only: Responses has no `n`)."""

    def __init__(self, body: dict[str, Any], rid: str) -> None:
        self.body = body
        self.rid = rid
        self.namespaces = tool_namespaces(body.get("tools"))
        self.customs = custom_tool_names(body.get("tools"))
        self.seq = 0
        self.response: dict[str, Any] | None = None
        self.items: list[dict[str, Any]] = []  # output items, finished ones in their final shape
        self.open: dict[str, Any] | None = None  # the item being streamed
        self.calls: dict[int, list[Any]] = {}  # chat tool-call index -> [id, name, [argument parts]], held
        self.held: list[tuple[str, Any]] | None = None  # after the first tool call: ("text", str) / ("call", index)
        self.model_fault: ModelFault | None = None  # every answer is carried as it came
        self.finish_reason: str | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.reported_usage: dict[str, Any] | None = None
        self.pending: list[bytes] = []  # events made and not yet handed over

    def _emit(self, kind: str, **fields: Any) -> None:
        """Queue one event; `_take` hands the queue over (events made before a chunk failed are still sent, first)."""
        data = orjson.dumps({"type": kind, "sequence_number": self.seq, **fields})
        self.seq += 1
        self.pending.append(b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n")

    def _take(self) -> bytes:
        out, self.pending = b"".join(self.pending), []
        return out

    def _start(self, created: Any) -> None:
        if self.response is None:
            self.response = skeleton(self.body, self.rid, int(created if isinstance(created, int) else time.time()))
            self._emit("response.created", response=self.response)
            self._emit("response.in_progress", response=self.response)

    def feed(self, chunk: dict[str, Any]) -> bytes:
        self._start(chunk.get("created"))
        self.prompt_tokens = len(chunk.get("prompt_token_ids") or ()) or self.prompt_tokens
        if isinstance(chunk.get("usage"), dict):
            self.reported_usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.completion_tokens += len(choice.get("token_ids") or ())
            delta = choice.get("delta") or {}
            if delta.get("content"):
                text = _typed(delta["content"], str, "delta.content")
                if self.held is None:
                    self._text(text)
                else:
                    self.held.append(("text", text))
            for call in _typed(delta.get("tool_calls") or [], list, "delta.tool_calls"):
                self._hold_call(_typed(call, dict, "a tool call delta"))
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        return self._take()

    def _suffix(self) -> str:
        return self.rid.removeprefix("resp_")

    def _text(self, text: str) -> None:
        if self.open is None or self.open["type"] != "message":
            self._close()
            index = len(self.items)
            self.open = {**message_item(f"msg_{self._suffix()}_{index}", "", "in_progress"), "content": []}
            self._emit("response.output_item.added", output_index=index, item=self.open)
            self._emit("response.content_part.added", item_id=self.open["id"], output_index=index, content_index=0,
                       part=text_part(""))
            self.open["text"] = []  # its deltas, joined once it closes (adding to a string was quadratic)
        self.open["text"].append(text)
        self._emit("response.output_text.delta", item_id=self.open["id"], output_index=len(self.items),
                   content_index=0, delta=text, logprobs=[])

    def _hold_call(self, call: dict[str, Any]) -> None:
        """One tool-call delta, held by its index until the answer ends (the first closes the streamed text)."""
        function = _typed(call.get("function") or {}, dict, "a tool call's function")
        arguments = _typed(function.get("arguments") or "", str, "a tool call's arguments")
        name = _typed(function.get("name") or "", str, "a tool call's name")
        call_id = _typed(call.get("id") or "", str, "a tool call's id")
        if self.held is None:
            self._close()
            self.held = []
        index = call.get("index", 0)
        if index not in self.calls:
            self.calls[index] = [call_id, name, []]
            self.held.append(("call", index))
        held = self.calls[index]
        held[0], held[1] = held[0] or call_id, held[1] or name
        held[2].append(arguments)

    def _call(self, call_id: str, name: str, arguments: str) -> None:
        """One whole function_call (or custom_tool_call) item: added, its arguments (input) in one delta, done."""
        self._close()
        position = len(self.items)
        item = tool_call_item(f"fc_{self._suffix()}_{position}", call_id or f"call_{self._suffix()}_{position}",
                              name, "", "in_progress", self.namespaces, self.customs)
        self.open = item
        self._emit("response.output_item.added", output_index=position, item=item)
        if item["type"] == "custom_tool_call":
            item["input"] = custom_input(arguments)
            if item["input"]:
                self._emit("response.custom_tool_call_input.delta", item_id=item["id"], output_index=position,
                           delta=item["input"])
        elif arguments:
            item["arguments"] = arguments
            self._emit("response.function_call_arguments.delta", item_id=item["id"], output_index=position,
                       delta=arguments)
        self._close()

    def _release_held(self) -> None:
        """The held text and calls as items, in the order they began."""
        for kind, value in self.held or ():
            if kind == "text":
                self._text(value)
            else:
                call_id, name, parts = self.calls[value]
                self._call(call_id, name, "".join(parts))
        self.held = None

    def _close(self) -> None:
        """Finish the open item (if any): its done events, and it joins `items` in its final shape."""
        item, self.open = self.open, None
        if item is None:
            return
        index = len(self.items)
        status, _ = status_of(self.finish_reason)
        if item["type"] == "message":
            text = "".join(item.pop("text"))
            done = message_item(item["id"], text, status)
            self._emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                       text=text, logprobs=[])
            self._emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                       part=text_part(text))
        elif item["type"] == "custom_tool_call":
            done = {**item, "status": "completed"}
            self._emit("response.custom_tool_call_input.done", item_id=item["id"], output_index=index,
                       input=item["input"])
        else:
            done = {**item, "status": "completed"}
            self._emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                       arguments=item["arguments"])
        self.items.append(done)
        self._emit("response.output_item.done", output_index=index, item=done)

    def _final(self, status: str, **fields: Any) -> dict[str, Any]:
        assert self.response is not None
        counts = self.reported_usage or {}
        return {**self.response, "status": status, "output": self.items,
                "usage": usage(counts.get("prompt_tokens", self.prompt_tokens),
                               counts.get("completion_tokens", self.completion_tokens)), **fields}

    def finish(self) -> bytes:
        """Close the open item (an answer with no output at all gets an empty message) and the response."""
        self._start(None)
        self._release_held()
        if self.open is None and not self.items:
            self._text("")
        self._close()
        status, incomplete = status_of(self.finish_reason)
        self._emit(f"response.{status}", response=self._final(status, incomplete_details=incomplete))
        return self._take()

    def error(self, message: str, code: str) -> bytes:
        """The events still queued, an `error` event (with the gateway's code), then `response.failed` with the output
        streamed so far (its `error.code` is `server_error`, the one of OpenAI's codes that fits a gateway or engine
        failure)."""
        self._start(None)
        failed = self._final("failed", error={"code": "server_error", "message": f"{message} ({code})"})
        if self.open is not None:  # the item cut short, as far as it came
            cut = self.open
            failed["output"] = [*self.items, message_item(cut["id"], "".join(cut.get("text", ())), "incomplete")
                                if cut["type"] == "message" else {**cut, "status": "incomplete"}]
        self._emit("error", code=code, message=message, param=None)
        self._emit("response.failed", response=failed)
        return self._take()


def _typed(value: Any, kind: type, what: str) -> Any:
    """`value` if it is a `kind`; ProtocolError (a broken answer) otherwise."""
    if not isinstance(value, kind):
        raise ProtocolError(f"{what} must be a {kind.__name__}, not {str(value)[:80]}")
    return value
