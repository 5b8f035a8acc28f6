"""A JSON body is declared as JSON whatever its Content-Type (curl -d sends a form type); anything else is untouched."""

from __future__ import annotations

import pytest

from gateway.asgi import as_json_request, declares_json, header

FORM = b"application/x-www-form-urlencoded"


def scope_of(content_type: bytes | None) -> dict:
    """An HTTP scope with an authorization header and, when given, a Content-Type."""
    headers = [(b"authorization", b"Bearer t")] + ([(b"content-type", content_type)] if content_type else [])
    return {"type": "http", "path": "/v1/admin/models", "headers": headers}


@pytest.mark.parametrize("content_type", [FORM, b"text/plain", None])
@pytest.mark.parametrize("body", [b'{"name": "policy"}', b'  [1, 2]', b'{}'])
def test_a_json_body_under_another_type_is_declared_json(content_type, body) -> None:
    scope = as_json_request(scope_of(content_type), body)
    assert header(scope, b"content-type") == "application/json"
    assert [key for key, _ in scope["headers"]].count(b"content-type") == 1
    assert header(scope, b"authorization") == "Bearer t"


@pytest.mark.parametrize("body", [b"name=policy", b"{not json", b'{"a": ', b'"hello"', b"5", b""])
def test_a_body_that_is_not_a_json_object_or_array_is_left_as_it_came(body) -> None:
    scope = scope_of(FORM)
    assert as_json_request(scope, body) is scope


@pytest.mark.parametrize("content_type", [b"application/json", b"application/json; charset=utf-8",
                                          b"application/merge-patch+json", b"Application/JSON"])
def test_a_declared_json_type_is_kept(content_type) -> None:
    scope = scope_of(content_type)
    assert declares_json(scope)
    assert as_json_request(scope, b"{}") is scope


def test_the_original_scope_is_not_modified() -> None:
    scope = scope_of(FORM)
    as_json_request(scope, b"{}")
    assert header(scope, b"content-type") == FORM.decode()
