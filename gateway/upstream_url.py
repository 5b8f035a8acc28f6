"""The base URL a model may be registered with: an absolute http(s) URL with a host the HTTP client can reach, and
never the gateway itself.

`check_base_url` is the shape (a `ModelIn` validator: 400 naming `base_url`): the gateway appends the protocol's
path (`/chat/completions`, the engine's `/tokenize` at its root) to it and records it with every call, so a URL
without a host (`http://`, once stored as `http:`), with a bad port, a query, a fragment or credentials is refused
before it can break every call routed to it.

`gateway_address` is the loop check (the registering route: 422 `base_url_is_gateway`): a base URL whose host and
port are the gateway's own would send the harness's calls back into the gateway. The gateway knows itself by its
listening address (config `host`/`port`; a wildcard host means every local name), the local address the request
came in on, the Host header the caller used, and its `public_url`; loopback aliases (`localhost`, 127.0.0.0/8,
`::1`, `0.0.0.0`, the machine's host name) are one host.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

try:
    import yarl  # aiohttp's URL parser: what the gateway's HTTP client will parse
except ImportError:  # a venv that holds only the wire records (the trainer's verl venv) registers no models
    yarl = None

SCHEMES = {"http": 80, "https": 443}
"""The schemes an upstream may have, with their default ports."""
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
REGISTER_HINT = "; register the engine's OpenAI base URL, e.g. http://engine-host:8000/v1"


def check_base_url(url: str) -> str:
    """`url` without trailing slashes when it is an absolute http(s) URL with a host, a port in 1-65535, and no query,
    fragment or credentials; ValueError naming the problem and the fix otherwise."""
    if any(char <= " " or char == "\x7f" for char in url):
        raise ValueError(f"base_url {url!r} contains whitespace or a control character{REGISTER_HINT}")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a bad port, an unclosed IPv6 bracket
        raise ValueError(f"base_url {url!r} is not a valid URL ({exc}){REGISTER_HINT}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"base_url {url!r} must start with http:// or https://{REGISTER_HINT}")
    if not parts.hostname:
        raise ValueError(f"base_url {url!r} has no host{REGISTER_HINT}")
    if port == 0:
        raise ValueError(f"base_url {url!r} has port 0, which no server listens on{REGISTER_HINT}")
    if parts.query or parts.fragment or url.rstrip("/").endswith(("?", "#")):
        raise ValueError(f"base_url {url!r} has a query or fragment: the gateway appends the protocol's path "
                         f"(/chat/completions) to it{REGISTER_HINT}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"base_url {url!r} holds credentials, which would be recorded with every call; give the "
                         "engine's URL without them")
    _check_host(url, parts)
    return url.rstrip("/")


def _check_host(url: str, parts: SplitResult) -> None:
    host = parts.hostname or ""
    problem = None
    if host.replace(".", "").isdigit() and not _is_ip(host):
        problem = "is not an IPv4 address"
    else:
        try:
            host.encode("idna")
            if yarl is not None:
                yarl.URL(url)  # what the HTTP client will parse
        except (UnicodeError, ValueError):
            problem = "is not a host name (a label is empty, longer than 63 characters or not encodable)"
    if problem:
        raise ValueError(f"base_url {url!r}: its host {host!r} {problem}{REGISTER_HINT}")


@dataclass(frozen=True)
class Address:
    """A host and port the gateway answers on, and how it knows (for the message)."""

    host: str
    port: int
    source: str


def own_addresses(bind_host: str, bind_port: int, public_url: str | None, scope: dict) -> list[Address]:
    """The addresses this gateway answers on, as seen from one request's ASGI `scope`."""
    found = [Address(bind_host, bind_port, "its listening address (config host and port)")]
    server = scope.get("server")
    if server and server[1] is not None:
        found.append(Address(str(server[0]), int(server[1]), "the local address this request came in on"))
    default_port = SCHEMES.get(scope.get("scheme", "http"), 80)
    for name, value in scope.get("headers", ()):
        if name == b"host":
            found.extend(_address(f"//{value.decode('latin-1')}", default_port, "the Host this request was sent to"))
    if public_url:
        found.extend(_address(public_url, 80, "its public_url"))
    return found


def _address(url: str, default_port: int, source: str) -> list[Address]:
    try:
        parts = urlsplit(url)
        port = parts.port or SCHEMES.get(parts.scheme.lower(), default_port)
    except ValueError:
        return []
    return [Address(parts.hostname, port, source)] if parts.hostname else []


def gateway_address(url: str, addresses: Iterable[Address]) -> Address | None:
    """The gateway's own address that `url` (a checked base URL) points at, if any."""
    parts = urlsplit(url)
    host, port = _normal(parts.hostname or ""), parts.port or SCHEMES[parts.scheme.lower()]
    for own in addresses:
        own_host = _normal(own.host)
        if port == own.port and (host == own_host or (_is_local(host) and _is_local(own_host))):
            return own
    return None


def _normal(host: str) -> str:
    """A host name lower-cased without its trailing dot, an IP address in its compressed form (IPv4-mapped IPv6 as
    IPv4)."""
    host = host.strip("[]").lower().rstrip(".")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def _is_local(host: str) -> bool:
    """A name of this machine: a loopback alias, the unspecified address, or its host name."""
    if host in LOCAL_NAMES or host.endswith(".localhost") or host == socket.gethostname().lower():
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
