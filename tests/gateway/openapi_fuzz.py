"""Hypothesis strategies for requests to every operation of an OpenAPI document: path and query parameters, JSON
bodies shaped by the schema (with arbitrary JSON mixed in at every level), raw bytes, and a credential drawn from a
given set. Built for the gateway's fuzz test; no schema library beyond the document itself."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

METHODS = ("get", "post", "put", "patch", "delete")
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.floats(allow_nan=False)
                | st.text(max_size=20))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


@dataclass(frozen=True)
class Operation:
    """One path and method of the document."""

    path: str  # the templated path, e.g. /v1/admin/rollouts/{rollout_id}
    method: str  # lower-case HTTP method
    spec: dict[str, Any]  # the operation object


@dataclass(frozen=True)
class FuzzRequest:
    """One generated request."""

    method: str  # upper-case HTTP method
    url: str  # path and query string
    body: bytes | None  # the raw body
    headers: dict[str, str]  # content type and credential


def operations(document: dict[str, Any]) -> list[Operation]:
    """Every operation of the document, in path order."""
    return [Operation(path, method, item[method]) for path, item in sorted(document["paths"].items())
            for method in METHODS if method in item]


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = document
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def shaped(document: dict[str, Any], schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy:
    """Values shaped like `schema` (types, enums, properties), with arbitrary JSON mixed in at every level."""
    schema = _resolve(document, schema)
    if depth > 4:
        return JSON_VALUES
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return st.one_of([shaped(document, option, depth + 1) for option in options]) | JSON_VALUES
    if "enum" in schema:
        return st.sampled_from(schema["enum"]) | JSON_SCALARS
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        props = schema.get("properties", {})
        fields = {name: shaped(document, sub, depth + 1) for name, sub in props.items()}
        required = set(schema.get("required", []))
        return st.fixed_dictionaries({k: v for k, v in fields.items() if k in required},
                                     optional={k: v for k, v in fields.items() if k not in required}) | JSON_VALUES
    if kind == "array":
        return st.lists(shaped(document, schema.get("items", {}), depth + 1), max_size=3) | JSON_VALUES
    return _scalar(kind) | JSON_SCALARS


def _scalar(kind: str | None) -> st.SearchStrategy:
    if kind == "integer":
        return st.integers(-5, 10) | st.integers(-(2**70), 2**70)
    if kind == "number":
        return st.floats(-1e6, 1e6, allow_nan=False) | st.sampled_from([0.0, -0.0, 1e308, -1e308])
    if kind == "boolean":
        return st.booleans()
    return st.text(max_size=30) | st.sampled_from(["", "queued", "running", "succeeded", "failed", "agent", "infra"])


def _query_value(name: str, schema: dict[str, Any]) -> st.SearchStrategy:
    if name.endswith("_s"):  # a wait: keep it short so the fuzz stays bounded in time
        return st.sampled_from(["0", "0.01", "-1", "abc", "1e400", "nan"])
    kind = schema.get("type") or next((s.get("type") for s in schema.get("anyOf", []) if s.get("type")), None)
    return _scalar(kind).map(lambda v: str(v).lower() if isinstance(v, bool) else str(v)) | st.text(max_size=10)


def requests(document: dict[str, Any], op: Operation, path_values: dict[str, list[str]],
             credentials: list[str | None],
             bodies: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[FuzzRequest]:
    """Requests to `op`: path parameters mostly from `path_values` (else arbitrary text), query parameters, a body
    (JSON bodies also drawn from `bodies`, near-valid ones the schema cannot describe), a credential mostly one of
    the first two of `credentials`."""

    @st.composite
    def build(draw) -> FuzzRequest:
        url = op.path
        query = []
        for param in op.spec.get("parameters", []):
            name, where = param["name"], param["in"]
            if where == "path":
                known = st.sampled_from(path_values.get(name, ["x"]))
                value = draw(st.one_of(known, known, known, st.text(min_size=1, max_size=20)))
                url = url.replace("{" + name + "}", quote(value, safe=""))
            elif where == "query" and draw(st.booleans()):
                query.append(f"{name}={quote(draw(_query_value(name, param.get('schema', {}))), safe='')}")
        body, content_type = draw(_body(document, op, bodies))
        credential = draw(st.sampled_from(credentials[:2]) | st.sampled_from(credentials))
        headers = {"content-type": content_type} if content_type else {}
        if credential is not None:
            headers["authorization"] = f"Bearer {credential}"
        return FuzzRequest(op.method.upper(), url + ("?" + "&".join(query) if query else ""), body, headers)

    return build()


def _body(document: dict[str, Any], op: Operation,
          bodies: st.SearchStrategy[Any] | None) -> st.SearchStrategy[tuple[bytes | None, str | None]]:
    content = op.spec.get("requestBody", {}).get("content", {})
    raw = st.tuples(st.binary(max_size=64), st.sampled_from([None, "application/json", "text/plain"]))
    if "application/json" in content:
        schema = content["application/json"].get("schema", {})
        values = shaped(document, schema) if bodies is None else st.one_of(bodies, bodies, shaped(document, schema))
        as_json = values.map(lambda value: (json.dumps(value).encode(), "application/json"))
        return as_json | raw
    if "application/octet-stream" in content:
        return st.tuples(st.binary(max_size=256), st.just("application/octet-stream")) | raw
    return st.just((None, None)) | raw
