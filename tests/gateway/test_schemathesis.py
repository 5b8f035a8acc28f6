"""Schemathesis against the served OpenAPI (issue 29 point 2): every operation, with data that fits its schema and
data that does not, answers no 5xx; and the harness routes' schemas describe what they accept (data generated from
them is answered, not refused).

The in-process gateway (real HTTP on loopback, the scripted upstream behind it); a fixed seed and a bounded number
of cases per operation and mode (`CASES`), so the test is one short fast-tier run. Path parameters are mostly the
rollouts set up for the operation (live, claimed, finished), credentials mostly the right one; long-polls wait
briefly; whatever a case does to the gateway as a whole (the model registry, a pause) is undone after it.

A longer run with another seed (tests/README.md, "Fuzzing"):
    HARNESSRL_SCHEMATHESIS_SEED=2 HARNESSRL_SCHEMATHESIS_CASES=150 .venv/bin/python -m pytest \\
        tests/gateway/test_schemathesis.py -p no:cacheprovider
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode

from gateway.app import create_app
from gateway.config import GatewayConfig
from gateway.records import RolloutState
from tests.gateway.api_support import new_id, write_config
from tests.gateway.support import ADMIN_TOKEN, GRADER_TOKEN
from tests.inprocess import InProcessGateway

SEED = int(os.environ.get("HARNESSRL_SCHEMATHESIS_SEED", "29"))
CASES = int(os.environ.get("HARNESSRL_SCHEMATHESIS_CASES", "8"))
"""Cases per operation and generation mode (positive, negative)."""
DOCUMENT = create_app(GatewayConfig(admin_token="doc-only")).admin.openapi()
SCHEMA = schemathesis.openapi.from_dict(DOCUMENT)
OPERATIONS = [(path, method.upper()) for path, item in sorted(DOCUMENT["paths"].items()) for method in item]
GLOBAL = ("/v1/admin/models", "/v1/admin/pause")
"""Paths whose cases change the gateway as a whole: undone after each case."""
SHORT_WAIT = 0.05


@dataclass
class Served:
    """The gateway under test, the upstream its model points at, one HTTP session."""

    gateway: InProcessGateway
    upstream: str
    http: requests.Session

    def admin(self, method: str, path: str, **kwargs) -> requests.Response:
        return self.http.request(method, self.gateway.url + path, timeout=30,
                                 headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, **kwargs)

    def restore(self) -> None:
        """The registry as set up (one model, `policy`), dispatch resumed."""
        self.admin("POST", "/v1/admin/resume")
        for model in self.admin("GET", "/v1/admin/models").json():
            assert self.admin("DELETE", f"/v1/admin/models/{quote(model['name'], safe='').replace('.', '%2E')}").ok
        assert self.admin("POST", "/v1/admin/models", json={"name": "policy", "base_url": self.upstream}).ok


@pytest.fixture(scope="module")
def served(tmp_path_factory, scripted) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("schemathesis")
    # the scripted model answers at once: a 20 s upstream timeout, so that no machine load turns an answer into a 502
    config = write_config(folder / "gw.yaml", retry_attempts=1, upstream_timeout_s=20, pause_hold_timeout_s=1,
                          pause_drain_timeout_s=1, max_body_bytes=256 * 1024)
    gateway = InProcessGateway(folder / "store.db", config_path=config).start()
    with requests.Session() as http:
        yield Served(gateway, scripted.base_url, http)
    gateway.stop()


@dataclass(frozen=True)
class Fixtures:
    """What one operation's cases refer to: rollouts (live first), their keys, the credentials to try."""

    rollouts: list[str]
    live_key: str
    credentials: list[str | None]


def _fixtures(served: Served, harness: bool) -> Fixtures:
    """Fresh rollouts for one operation: a queued one with its key, a claimed one, a finished one."""
    served.restore()
    ids = [new_id("st") for _ in range(3)]
    specs = [{"id": i, "group_id": "schemathesis", "input": {"q": 1}} for i in ids]
    created = served.admin("POST", "/v1/admin/rollouts", json={"rollouts": specs}).json()
    served.admin("POST", "/v1/admin/rollouts/claim", json={"controller_id": "st", "limit": 1000})
    served.admin("PATCH", f"/v1/admin/rollouts/{ids[2]}", json={"state": RolloutState.SUCCEEDED})
    (live,) = served.admin("POST", "/v1/admin/rollouts", json={"rollouts": specs[:1]}).json()
    first = [live["api_key"], ADMIN_TOKEN] if harness else [ADMIN_TOKEN, GRADER_TOKEN]
    others = [GRADER_TOKEN, created[0]["api_key"], created[1]["api_key"], None, "not-a-key", "hrl.eA.1.forged"]
    return Fixtures(ids, live["api_key"], first + others)


def _cases(path: str, method: str, mode: GenerationMode, fixtures: Fixtures) -> st.SearchStrategy[Case]:
    """Cases of one operation: its rollout (when it has one) mostly one set up for it, else generated."""
    operation = SCHEMA[path][method]
    generated = operation.as_strategy(mode)
    if "{rollout_id}" not in path:
        return generated
    known = [operation.as_strategy(mode, path_parameters={"rollout_id": rollout}) for rollout in fixtures.rollouts]
    return st.one_of(known[0], known[0], *known, generated)


def _send(served: Served, case: Case, credential: str | None) -> requests.Response:
    """The case over HTTP, with `credential` (None: whatever the case generated) and long-polls shortened."""
    if isinstance(case.query, dict) and "wait_s" in case.query:
        case.query["wait_s"] = _short(case.query["wait_s"])
    headers = {} if credential is None else {"authorization": f"Bearer {credential}"}
    return case.call(base_url=served.gateway.url, session=served.http, headers=headers, timeout=30)


def _short(wait: object) -> object:
    """A long-poll's wait, at most SHORT_WAIT seconds when it is a number."""
    try:
        return min(float(str(wait)), SHORT_WAIT)
    except ValueError:
        return wait


def _negatable(path: str, method: str) -> bool:
    """Whether data can break the operation's schema: a JSON body, or a path or query parameter that is more than any
    string (headers are strings whatever their schema)."""
    spec = DOCUMENT["paths"][path][method.lower()]
    if "application/json" in spec.get("requestBody", {}).get("content", {}):
        return True
    loose = ({"type": "string"}, {"type": "string", "title": None})
    return any(param["in"] in ("path", "query") and {key: value for key, value in param["schema"].items()
                                                      if key not in ("title", "description")} not in loose
               for param in spec.get("parameters", []))


MODES = [(path, method, mode) for path, method in OPERATIONS
         for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
         if mode == GenerationMode.POSITIVE or _negatable(path, method)]


@pytest.mark.parametrize(("path", "method", "mode"), MODES, ids=[f"{m} {p} {g.value}" for p, m, g in MODES])
def test_no_case_answers_5xx(served, path, method, mode) -> None:
    fixtures = _fixtures(served, path.startswith("/r/"))

    @seed(SEED)
    @settings(max_examples=CASES, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=_cases(path, method, mode, fixtures), credential=st.sampled_from(fixtures.credentials[:1])
           | st.sampled_from(fixtures.credentials))
    def no_5xx(case: Case, credential: str | None) -> None:
        try:
            response = _send(served, case, credential)
        finally:
            if path.startswith(GLOBAL):
                served.restore()
        assert response.status_code < 500, (case.as_curl_command(), response.status_code, response.text[:500])

    no_5xx()


HARNESS_JSON = [path for path, method in OPERATIONS if path.startswith("/r/") and method == "POST"
                and "application/json" in DOCUMENT["paths"][path]["post"]["requestBody"]["content"]]
INEXPRESSIBLE = re.compile("|".join([
    r"final assistant turn \(prefill\)", r"names a tool, but the request has no function tools",
    r"which is not among the tools", r"two function tools are named", r"'input' is empty",
    r"previous response .* is not an answer of attempt", r"outside the range the gateway stores exactly",
]))
"""Refusals of what a JSON schema cannot say (gateway/openapi_schemas.py lists them)."""


@pytest.mark.parametrize("path", HARNESS_JSON)
def test_data_fitting_a_harness_schema_is_answered(served, path) -> None:
    """Before the schemas described the protocols, a body of a harness route was any object: nearly every generated
    one was refused, and the fuzzer barely reached the routes."""
    fixtures = _fixtures(served, harness=True)
    operation = SCHEMA[path]["POST"]
    refused: list[str] = []

    @seed(SEED)
    @settings(max_examples=CASES * 2, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(GenerationMode.POSITIVE, path_parameters={"rollout_id": fixtures.rollouts[0]}))
    def answered(case: Case) -> None:
        response = _send(served, case, fixtures.live_key)
        if response.status_code != 200 and not INEXPRESSIBLE.search(response.text):
            refused.append(f"{response.status_code} {response.text[:300]} for {case.body!r:.300}")

    answered()
    assert refused == []
