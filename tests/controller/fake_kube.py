"""A fake Kubernetes API server for the KubernetesRunner tests: the batch/v1 Jobs and core/v1 Secrets/Pods endpoints.

It stores what it is sent, answers lists filtered by equality label selectors, and lets a test set Job and Pod status.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

ROUTE = re.compile(r"^/(?:api/v1|apis/batch/v1)/namespaces/(?P<ns>[^/]+)/(?P<kind>jobs|secrets|pods)"
                   r"(?:/(?P<name>[^/]+))?(?P<log>/log)?$")


class FakeKube:
    """State of the fake cluster plus the server answering for it."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {"jobs": {}, "secrets": {}, "pods": {}}
        self.logs: dict[str, str] = {}  # pod name -> log text
        self.requests: list[tuple[str, str]] = []  # (method, path) in arrival order
        self.fail_next: dict[tuple[str, str], int] = {}  # (method, kind) -> HTTP status for the next such request
        self.patches: list[tuple[str, str, str, dict[str, Any]]] = []  # (kind, name, content type, body)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        # shutdown() waits for the serve loop's next poll: 0.5 s by default, paid at every test's exit
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeKube:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add_pod(self, job_name: str, status: dict[str, Any], log: str = "") -> str:
        """A pod of `job_name` with the Job's template labels and the given status."""
        job = self.objects["jobs"][job_name]
        name = f"{job_name}-{uuid.uuid4().hex[:5]}"
        labels = {**job["spec"]["template"]["metadata"]["labels"], "batch.kubernetes.io/job-name": job_name}
        self.objects["pods"][name] = {"apiVersion": "v1", "kind": "Pod",
                                      "metadata": {"name": name, "labels": labels},
                                      "spec": job["spec"]["template"]["spec"], "status": status}
        self.logs[name] = log
        return name

    def set_job_status(self, job_name: str, status: dict[str, Any]) -> None:
        self.objects["jobs"][job_name]["status"] = status


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """A JSON merge patch (also what a strategic merge patch of plain fields does)."""
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        elif value is None:
            target.pop(key, None)
        else:
            target[key] = value


def _matches(obj: dict[str, Any], selector: str | None) -> bool:
    labels = obj["metadata"].get("labels") or {}
    terms = [term.split("=", 1) for term in (selector or "").split(",") if term]
    return all(labels.get(key) == value for key, value in terms)


def _handler(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str) -> None:
            self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                              "code": code})

        def _route(self, method: str) -> None:
            url = urlparse(self.path)
            match = ROUTE.match(url.path)
            if match is None:
                self._status(404, f"NotFound: no fake route {url.path}")
                return
            kind, name = match["kind"], match["name"]
            with kube.lock:
                kube.requests.append((method, url.path))
                forced = kube.fail_next.pop((method, kind), None)
                if forced is not None:
                    self._status(forced, "Forced")
                    return
                store = kube.objects[kind]
                if match["log"]:
                    self._send(200, kube.logs.get(name, ""), "text/plain")
                elif method == "GET" and name is not None:
                    if name not in store:
                        self._status(404, "NotFound")
                        return
                    self._send(200, store[name])
                elif method == "GET" and name is None:
                    selector = parse_qs(url.query).get("labelSelector", [None])[0]
                    self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {},
                                     "items": [o for o in store.values() if _matches(o, selector)]})
                elif method == "POST":
                    body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                    if body["metadata"]["name"] in store:
                        self._status(409, "AlreadyExists")
                        return
                    body["metadata"]["uid"] = uuid.uuid4().hex
                    body.setdefault("status", {})
                    store[body["metadata"]["name"]] = body
                    self._send(201, body)
                elif method == "DELETE":
                    if store.pop(name, None) is None:
                        self._status(404, "NotFound")
                        return
                    if kind == "jobs":  # background propagation: the Job's pods go too
                        for pod in [p for p, o in kube.objects["pods"].items()
                                    if o["metadata"]["labels"].get("batch.kubernetes.io/job-name") == name]:
                            del kube.objects["pods"][pod]
                    self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
                elif method == "PATCH" and name is not None:
                    body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                    if name not in store:
                        self._status(404, "NotFound")
                        return
                    kube.patches.append((kind, name, self.headers.get("content-type", ""), body))
                    _merge(store[name], body)
                    self._send(200, store[name])
                else:
                    self._status(405, "MethodNotAllowed")

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._route("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._route("POST")

        def do_PATCH(self) -> None:  # noqa: N802
            self._route("PATCH")

        def do_DELETE(self) -> None:  # noqa: N802
            if "content-length" in self.headers:
                self.rfile.read(int(self.headers["content-length"]))
            self._route("DELETE")

    return Handler


def when_job_exists(kube: FakeKube, act: Callable[[str], None], *, prefix: str = "harnessrl-grade-",
                    timeout_s: float = 60.0, count: int = 1) -> threading.Thread:
    """Acts as the cluster: once a Job named `prefix...` exists, `act(its name)` in a (started, daemon) thread; so
    for each of the first `count` such Jobs, one after the other."""
    def wait_then_act() -> None:
        deadline, done = time.monotonic() + timeout_s, set()
        while time.monotonic() < deadline and len(done) < count:
            if names := [name for name in kube.objects["jobs"] if name.startswith(prefix) and name not in done]:
                done.add(names[0])
                act(names[0])
                continue
            time.sleep(0.02)
    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread
