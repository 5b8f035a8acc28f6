"""The server errors schemathesis found (issue 29 point 2), each a regression test: a value the store cannot keep in
any stored body, a model registered with a base URL that has no host or is the gateway itself, an upstream the HTTP
client cannot call. Each answered 500 (or was accepted) before; now a 4xx naming the problem, or a recorded 502 in
the protocol's shape."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from gateway import schema
from gateway.client import GatewayClient
from gateway.records import CallErrorCode, CallStatus
from gateway.sql import make_engine
from tests.gateway.api_support import create_rollouts, error_of, new_id, write_config
from tests.gateway.hostile_upstream import Answer, HostileUpstream
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN
from tests.inprocess import InProcessGateway

UNKEPT = {"past u64": "18446744073709551616", "below i64": "-9223372036854775809", "2**70": "1180591620717411303424",
          "NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "past a double": "1e400",
          "lone surrogate": '"\\ud800"'}
"""JSON values the store cannot keep exactly (strict_json), as the harness or an admin would send them."""
STORED = {  # (method, path, body with the value at {v}, the field named, who sends it)
    "rollout input": ("POST", "/v1/admin/rollouts", '{"rollouts": [{"id": "{new}", "group_id": "g", "input": '
                      '{"n": {v}}}]}', "rollouts.0.input.n", "admin"),
    "admin event": ("POST", "/v1/admin/rollouts/{id}/events", '{"kind": "log", "payload": {"n": [1, {v}]}}',
                    "payload.n.1", "admin"),
    "reward details": ("POST", "/v1/admin/rollouts/{id}/reward", '{"reward": 1.0, "details": {"n": {v}}}',
                       "details.n", "grader"),
    "harness event": ("POST", "/r/{id}/events", '{"kind": "log", "payload": {"n": {v}}}', "payload.n", "key"),
    "chat call": ("POST", "/r/{id}/v1/chat/completions", '{"model": "policy", "max_tokens": {v}, "messages": '
                  '[{"role": "user", "content": "x"}]}', "max_tokens", "key"),
}


@pytest.fixture(scope="module")
def target(gateway):
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        (created,) = create_rollouts(admin, prefix="unkept")
    return created


def _send(client: httpx.Client, method: str, path: str, body: str, token: str) -> httpx.Response:
    return client.request(method, path, content=body.encode(), headers={"authorization": f"Bearer {token}",
                                                                       "content-type": "application/json"})


@pytest.mark.parametrize("value", UNKEPT.values(), ids=UNKEPT.keys())
@pytest.mark.parametrize(("method", "path", "body", "field", "who"), STORED.values(), ids=STORED.keys())
def test_a_value_the_store_cannot_keep_is_400_naming_the_field(gateway, admin, target, method, path, body, field,
                                                               who, value) -> None:
    token = {"admin": ADMIN_TOKEN, "grader": GRADER_TOKEN, "key": target.api_key}[who]
    new = new_id("unkept")
    raw = body.replace("{new}", new).replace("{v}", value)
    events, calls = len(admin.list_events(target.id)), len(admin.calls(target.id))
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        error = error_of(_send(client, method, path.format(id=target.id), raw, token), 400)
        assert client.get("/health").status_code == 200  # the same connection still serves (it was dropped)
    assert (error["code"], error["param"], f"field {field!r}" in error["message"]) == ("invalid_request", field,
                                                                                      True)
    stored = (len(admin.list_events(target.id)), len(admin.calls(target.id)), admin.get_rollout(target.id).reward)
    assert stored == (events, calls, None)
    assert _status(gateway, f"/v1/admin/rollouts/{new}") == 404


@pytest.mark.parametrize(("method", "path", "body", "field", "who"), STORED.values(), ids=STORED.keys())
def test_nesting_deeper_than_the_store_writes_is_400_naming_the_field(gateway, admin, target, method, path, body,
                                                                      field, who) -> None:
    """300 levels of arrays: orjson reads them and refuses to write them (a TypeError, 500), found beside the
    integers."""
    token = {"admin": ADMIN_TOKEN, "grader": GRADER_TOKEN, "key": target.api_key}[who]
    raw = body.replace("{new}", new_id("deep")).replace("{v}", "[" * 300 + "]" * 300)
    events, calls = len(admin.list_events(target.id)), len(admin.calls(target.id))
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        error = error_of(_send(client, method, path.format(id=target.id), raw, token), 400)
    assert (error["param"].startswith(f"{field}.0.0"), "nested past 254 levels" in error["message"]) == (True, True)
    assert (len(admin.list_events(target.id)), len(admin.calls(target.id))) == (events, calls)


def _local_port(response: httpx.Response) -> int:
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


def test_a_bug_of_one_admin_request_leaves_its_keep_alive_connection_open(gateway, monkeypatch) -> None:
    """The 500 of an unexpected error (here a store read made to fail) is answered, and the connection then serves
    the next request: the server used to drop it after each such error."""

    async def broken() -> list:
        raise RuntimeError("a bug")

    monkeypatch.setattr(gateway._server.config.app.context.store, "list_models", broken)
    with httpx.Client(base_url=gateway.url, timeout=30, headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        failed = client.get("/v1/admin/models")
        port = _local_port(failed)
        after = client.get("/health")
        assert (error_of(failed, 500)["code"], after.status_code, _local_port(after)) == ("internal_error", 200, port)


def test_integers_at_the_edges_of_the_kept_range_are_stored_exactly(gateway, admin) -> None:
    new = new_id("edges")
    raw = ('{"rollouts": [{"id": "NEW", "group_id": "g", "input": {"top": 18446744073709551615, '
           '"bottom": -9223372036854775808, "text": "\\ud83d\\ude00"}}]}').replace("NEW", new)
    response = httpx.post(gateway.url + "/v1/admin/rollouts", content=raw.encode(), timeout=30,
                          headers={"authorization": f"Bearer {ADMIN_TOKEN}", "content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert admin.get_rollout(new).input == {"top": 2**64 - 1, "bottom": -(2**63), "text": "\U0001f600"}


def _status(gateway, path: str) -> int:
    return httpx.get(gateway.url + path, headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30).status_code


BAD_SHAPES = ["http://", "http:", "http:///v1", "http://:8000/v1", "http://host:99999/v1", "http://host:0/v1",
              "http://[::1/v1", "http://ho st/v1", "http://host\n/v1", "http://host/v1?key=1", "http://host/v1#x",
              "http://user:secret@host/v1", "ftp://host/v1", "host:8000/v1", "http://1.2.3.4.5/v1",
              "http://" + "a" * 64 + ".example/v1", "http://a..b/v1"]


@pytest.mark.parametrize("base_url", BAD_SHAPES)
def test_a_base_url_that_is_not_an_absolute_http_url_with_a_host_is_400(gateway, admin, base_url) -> None:
    name = new_id("shape")
    response = httpx.post(gateway.url + "/v1/admin/models", json={"name": name, "base_url": base_url}, timeout=30,
                          headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    error = error_of(response, 400)
    assert (error["param"], "base_url" in error["message"]) == ("base_url", True)
    assert name not in [m.name for m in admin.list_models()]


@pytest.mark.parametrize("base_url", ["http://engine:8000/v1/", "https://[::1]:8443/v1", "HTTP://Engine.Local/v1",
                                      "http://10.0.0.7:8000"])
def test_a_well_formed_base_url_is_registered_without_trailing_slashes(admin, base_url) -> None:
    name = new_id("shape")
    record = admin.register_model(name, base_url)
    assert record.base_url == base_url.rstrip("/")
    admin.delete_model(name)


@pytest.mark.parametrize("name", ["Qwen/Qwen3-8B", "a?b#c", "50% off", "two words", "..", "x/"])
def test_a_model_of_any_registered_name_can_be_re_versioned_and_deleted(admin, scripted, name) -> None:
    """Found by the longer run: a name with '/', '?' or '#' could be registered, then never changed nor deleted."""
    admin.register_model(name, scripted.base_url)
    assert [m.version for m in admin.set_model_version(name, 7)] == [7]
    assert admin.delete_model(name) == 1
    assert name not in [m.name for m in admin.list_models()]


def test_a_model_name_with_a_control_character_is_400(gateway) -> None:
    response = httpx.post(gateway.url + "/v1/admin/models", json={"name": "a\nb", "base_url": "http://engine/v1"},
                          headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    assert error_of(response, 400)["param"] == "name"


def _self_urls(port: int) -> dict[str, str]:
    return {"the URL it serves on": f"http://127.0.0.1:{port}/v1", "localhost": f"http://localhost:{port}",
            "another loopback address": f"http://127.0.0.2:{port}/v1", "IPv6 loopback": f"http://[::1]:{port}/v1",
            "the unspecified address": f"http://0.0.0.0:{port}/v1", "a rollout's base URL": f"http://LOCALHOST.:"
            f"{port}/r/some-rollout/v1", "IPv4-mapped loopback": f"http://[::ffff:127.0.0.1]:{port}/v1"}


@pytest.mark.parametrize("which", list(_self_urls(1)))
def test_a_base_url_that_is_the_gateway_itself_is_422(gateway, admin, which) -> None:
    name = new_id("loop")
    response = httpx.post(gateway.url + "/v1/admin/models", timeout=30, headers={"authorization": f"Bearer "
                          f"{ADMIN_TOKEN}"}, json={"name": name, "base_url": _self_urls(gateway.port)[which]})
    error = error_of(response, 422)
    assert (error["code"], error["param"], "this gateway itself" in error["message"]) == (
        "base_url_is_gateway", "base_url", True)
    assert name not in [m.name for m in admin.list_models()]


def test_the_host_a_caller_reaches_the_gateway_by_is_the_gateway_too(gateway, admin) -> None:
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}", "host": "gateway.example:8100"}
    refused = httpx.post(gateway.url + "/v1/admin/models", headers=headers, timeout=30,
                         json={"name": new_id("loop"), "base_url": "http://gateway.example:8100/v1"})
    other_port = httpx.post(gateway.url + "/v1/admin/models", headers=headers, timeout=30,
                            json={"name": new_id("engine"), "base_url": "http://gateway.example:8000/v1"})
    assert (refused.status_code, other_port.status_code) == (422, 200), (refused.text, other_port.text)
    admin.delete_model(other_port.json()["name"])


UNCALLABLE = {"no host (stored by an older gateway as 'http:')": "http:",
              "a host the client cannot encode": "http://" + "a" * 64 + ".example/v1"}
CHAT = {"model": "M", "messages": [{"role": "user", "content": "hi"}]}
ROUTES = {  # path, body, stream, error shape
    "chat": ("/v1/chat/completions", CHAT, False, "openai"),
    "chat stream": ("/v1/chat/completions", {**CHAT, "stream": True}, True, "openai"),
    "completions": ("/v1/completions", {"model": "M", "prompt": "hi"}, False, "openai"),
    "messages": ("/v1/messages", {**CHAT, "max_tokens": 8}, False, "anthropic"),
    "messages stream": ("/v1/messages", {**CHAT, "max_tokens": 8, "stream": True}, True, "anthropic"),
    "count_tokens": ("/v1/messages/count_tokens", CHAT, False, "anthropic"),
    "responses": ("/v1/responses", {"model": "M", "input": "hi"}, False, "openai"),
    "responses stream": ("/v1/responses", {"model": "M", "input": "hi", "stream": True}, True, "openai"),
}


class _NotTls(socketserver.BaseRequestHandler):
    """Answers a TLS handshake in plain HTTP."""

    def handle(self) -> None:
        self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")


@pytest.fixture(scope="module")
def plain_http() -> Iterator[int]:
    """The port of a plain-HTTP server, for a TLS error."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _NotTls)
    threading.Thread(target=server.serve_forever, name="plain-http", daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def uncallable(tmp_path_factory, plain_http) -> Iterator[tuple[InProcessGateway, GatewayClient, HostileUpstream]]:
    """A gateway (one upstream try per call) whose store holds models the HTTP client cannot call, as an older
    gateway stored them (written to its database before it starts), a TLS one, and a hostile upstream."""
    folder = tmp_path_factory.mktemp("uncallable")
    engine = make_engine(f"sqlite:///{folder / 'store.db'}")
    with engine.begin() as conn:
        schema.create_tables(conn)
        for i, base_url in enumerate(UNCALLABLE.values()):
            conn.execute(sa.insert(schema.models).values(name=f"broken{i}", base_url=base_url, served_name="m",
                                                         version=0))
    engine.dispose()
    upstream = HostileUpstream().start()
    gateway = InProcessGateway(folder / "store.db", config_path=write_config(folder / "gw.yaml",
                                                                             retry_attempts=1)).start()
    with GatewayClient(gateway.url, ADMIN_TOKEN) as admin:
        admin.register_model("tls", f"https://127.0.0.1:{plain_http}/v1")
        admin.register_model("hostile", upstream.base_url)
        yield gateway, admin, upstream
    gateway.stop()
    upstream.stop()


def _protocol_error(response: httpx.Response, shape: str) -> str:
    """The gateway's code of a 502 in the protocol's shape."""
    assert response.status_code == 502, (response.status_code, response.text)
    body = response.json()
    if shape == "anthropic":
        assert (body["type"], body["error"]["type"]) == ("error", "api_error"), body
        return body["error"]["message"].rsplit("[", 1)[1].rstrip("]")
    assert set(body) == {"error"} and body["error"]["type"] == "upstream_error", body
    return body["error"]["code"]


@pytest.mark.parametrize("model", ["broken0", "broken1", "tls"], ids=[*UNCALLABLE, "a TLS error"])
@pytest.mark.parametrize(("path", "body", "stream", "shape"), ROUTES.values(), ids=ROUTES.keys())
def test_an_upstream_the_client_cannot_call_is_a_recorded_502(uncallable, model, path, body, stream, shape) -> None:
    gateway, admin, _ = uncallable
    (created,) = create_rollouts(admin, prefix="uncallable")
    response = httpx.post(created.base_url.removesuffix("/v1") + path, json={**body, "model": model}, timeout=30,
                          headers={"authorization": f"Bearer {created.api_key}"})
    assert _protocol_error(response, shape) == CallErrorCode.UPSTREAM_UNAVAILABLE
    (call,) = admin.calls(created.id)
    assert (call.status, call.http_status, call.error_code, call.stream) == (
        CallStatus.ERROR, 502, CallErrorCode.UPSTREAM_UNAVAILABLE, stream)
    if model != "tls":
        assert "base_url" in response.text and "could not be called" in call.error  # names the fix


CUT = {  # an answer whose body breaks off before its Content-Length, and the code it is recorded with
    "an error answer": (Answer((b'{"error": ',), status=404, headers=(("content-length", "100"),)),
                        CallErrorCode.UPSTREAM_UNAVAILABLE),
    "a stream with a bad version header": (Answer((b"data: {}\n\n",), headers=(
        ("content-type", "text/event-stream"), ("x-policy-version", "v-one"), ("content-length", "100"))),
        CallErrorCode.UPSTREAM_PROTOCOL_ERROR),
}


@pytest.mark.parametrize(("answer", "code"), CUT.values(), ids=CUT.keys())
@pytest.mark.parametrize(("path", "body", "shape"), [("/v1/chat/completions", {**CHAT, "stream": True}, "openai"),
                                                     ("/v1/messages", {**CHAT, "max_tokens": 8, "stream": True},
                                                      "anthropic")], ids=["chat", "messages"])
def test_an_answer_cut_short_is_a_recorded_502(uncallable, path, body, shape, answer, code) -> None:
    """The rest of a refused streamed answer is read where a failure to read it is handled, not left to raise."""
    gateway, admin, upstream = uncallable
    upstream.answer = answer
    (created,) = create_rollouts(admin, prefix="cut")
    response = httpx.post(created.base_url.removesuffix("/v1") + path, json={**body, "model": "hostile"},
                          timeout=30, headers={"authorization": f"Bearer {created.api_key}"})
    assert _protocol_error(response, shape) == code
    assert [c.error_code for c in admin.calls(created.id)] == [code]
