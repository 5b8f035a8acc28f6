"""upstream_url: a model's base URL is an absolute http(s) URL with a host the client can reach, never the gateway."""

from __future__ import annotations

import socket

import pytest

from gateway.upstream_url import Address, check_base_url, gateway_address, own_addresses


@pytest.mark.parametrize(("url", "problem"), [
    ("http://", "has no host"), ("http:", "has no host"), ("https://:443/v1", "has no host"),
    ("gopher://engine/v1", "must start with http:// or https://"), ("engine:8000/v1", "must start with http"),
    ("http://engine:65536/v1", "not a valid URL"), ("http://engine:0/v1", "port 0"),
    ("http://[::1/v1", "not a valid URL"), ("http://engine/v1 ", "whitespace"), ("http://en\tgine/v1", "whitespace"),
    ("http://engine/v1?token=1", "query or fragment"), ("http://engine/v1#top", "query or fragment"),
    ("http://engine/v1?", "query or fragment"), ("http://me:pw@engine/v1", "credentials"),
    ("http://1.2.3.4.5/v1", "not an IPv4 address"), ("http://a..b/v1", "not a host name"),
    ("http://" + "x" * 64 + ".example/v1", "not a host name"),
])
def test_a_base_url_the_client_cannot_call_is_refused_naming_why(url, problem) -> None:
    with pytest.raises(ValueError, match="base_url") as refused:
        check_base_url(url)
    assert problem in str(refused.value)


@pytest.mark.parametrize(("url", "kept"), [("http://engine:8000/v1/", "http://engine:8000/v1"),
                                           ("HTTPS://Engine.Example/v1", "HTTPS://Engine.Example/v1"),
                                           ("http://[::1]:8000", "http://[::1]:8000"),
                                           ("http://xn--n-nga1b.com/v1", "http://xn--n-nga1b.com/v1"),
                                           ("http://ünï.com/v1", "http://ünï.com/v1")])
def test_a_base_url_with_a_host_is_kept_without_trailing_slashes(url, kept) -> None:
    assert check_base_url(url) == kept


def scope(host_header: str | None = None, server: tuple[str, int] | None = ("127.0.0.1", 8100)) -> dict:
    headers = [(b"host", host_header.encode())] if host_header else []
    return {"type": "http", "scheme": "http", "server": server, "headers": headers}


def test_the_gateway_knows_itself_by_bind_address_local_address_host_header_and_public_url() -> None:
    found = own_addresses("0.0.0.0", 8100, "https://gw.example.com", scope("gw.internal:9000"))
    assert [(a.host, a.port) for a in found] == [("0.0.0.0", 8100), ("127.0.0.1", 8100), ("gw.internal", 9000),
                                                 ("gw.example.com", 443)]


@pytest.mark.parametrize(("url", "source"), [
    ("http://localhost:8100/v1", "bind"), ("http://127.9.9.9:8100", "bind"), ("http://[::1]:8100/v1", "bind"),
    (f"http://{socket.gethostname()}:8100/v1", "bind"), ("http://gw.internal:9000/v1", "host"),
    ("https://GW.example.com./v1", "public"), ("http://[::ffff:127.0.0.1]:8100/v1", "bind"),
])
def test_a_base_url_at_one_of_its_addresses_is_the_gateway(url, source) -> None:
    addresses = [Address("0.0.0.0", 8100, "bind"), Address("gw.internal", 9000, "host"),
                 Address("gw.example.com", 443, "public")]
    own = gateway_address(url, addresses)
    assert own is not None and own.source == source


@pytest.mark.parametrize("url", ["http://localhost:8000/v1", "http://engine:8100/v1", "http://gw.example.com/v1",
                                 "http://10.0.0.7:8100/v1"])
def test_another_port_or_host_is_not_the_gateway(url) -> None:
    addresses = [Address("127.0.0.1", 8100, "bind"), Address("gw.example.com", 443, "public")]
    assert gateway_address(url, addresses) is None


def test_a_gateway_bound_to_one_address_is_not_reached_on_loopback() -> None:
    assert gateway_address("http://127.0.0.1:8100/v1", [Address("10.0.0.5", 8100, "bind")]) is None
    assert gateway_address("http://10.0.0.5:8100/v1", [Address("10.0.0.5", 8100, "bind")]) is not None
