"""An OpenAI-shaped chat-completions server for the SWE harness's tests: each POST answered with a scripted text (or
an error status), every request kept."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class CompletionServer:
    """Answers the n-th POST (1-based) with `answer(n)` as the assistant's content, or with `status` when it is not
    200; keeps each request's path, Authorization header and JSON body. `.url` is the server's root (no /v1)."""

    def __init__(self, answer: Callable[[int], str], status: int = 200) -> None:
        self.seen: list[dict] = []
        self.answer, self.status = answer, status
        self.location: str | None = None  # sent as Location with a non-200 status (a redirect)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                                   "body": body})
                self._send(outer.status, outer._completion(len(outer.seen)) if outer.status == 200
                           else {"error": {"message": "refused by the test server"}})

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status != 200 and outer.location:
                    self.send_header("Location", outer.location)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def requests(self) -> list[dict]:
        """The JSON bodies received, in order."""
        return [request["body"] for request in self.seen]

    def _completion(self, n: int) -> dict:
        message = {"role": "assistant", "content": self.answer(n), "tool_calls": None}
        return {"id": f"c{n}", "object": "chat.completion", "created": 0, "model": "policy",
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
