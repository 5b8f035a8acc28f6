"""The connections one client address and the whole process may hold (gateway/connection_limits.py): pure
bookkeeping, and the settings it is built from."""

from __future__ import annotations

import resource

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway import connection_limits
from gateway.config import GatewayConfig
from gateway.connection_limits import (
    MAX_DEFAULT_TOTAL,
    MAX_REFUSALS_LINGERING,
    PRESSED_PER_CLIENT,
    Admission,
    ConnectionLimits,
    client_address,
    default_total,
    raise_descriptor_limit,
)

A = Admission


def limits(per_client: int = 2, total: int = 1000, exempt=("127.0.0.0/8", "::1/128")) -> ConnectionLimits:
    return ConnectionLimits.build(per_client, total, list(exempt))


def test_an_address_is_served_up_to_its_limit_then_refused_lingering_then_closed_at_once():
    state = limits(per_client=2)
    seen = [state.admit("10.0.0.1") for _ in range(2 + MAX_REFUSALS_LINGERING + 2)]
    assert seen == [A.ADMITTED] * 2 + [A.CLIENT_REFUSED] * MAX_REFUSALS_LINGERING + [A.CLIENT_CLOSED] * 2
    assert state.admit("10.0.0.2") == A.ADMITTED, "another address has its own count"


def test_a_released_connection_frees_its_place_and_a_refusal_that_ended_frees_its_linger():
    state = limits(per_client=1)
    assert state.admit("10.0.0.1") == A.ADMITTED
    refusals = [state.admit("10.0.0.1") for _ in range(MAX_REFUSALS_LINGERING)]
    assert state.admit("10.0.0.1") == A.CLIENT_CLOSED
    state.release("10.0.0.1", A.CLIENT_CLOSED)
    state.release("10.0.0.1", refusals[0])
    assert state.admit("10.0.0.1") == A.CLIENT_REFUSED, "one lingering refusal ended: the next one lingers"
    state.release("10.0.0.1", A.ADMITTED)
    assert state.admit("10.0.0.1") == A.ADMITTED


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"])
def test_loopback_has_no_per_client_limit_by_default(address):
    state = limits(per_client=1)
    assert [state.admit(address) for _ in range(50)] == [A.EXEMPT] * 50


@pytest.mark.parametrize(("exempt", "address", "expected"), [
    ([], "127.0.0.1", A.CLIENT_REFUSED),  # nothing exempt: loopback counts too
    (["10.1.0.0/16"], "10.1.2.3", A.EXEMPT),
    (["10.1.0.0/16"], "10.2.0.1", A.CLIENT_REFUSED),
    (["fd00::/8"], "fd12::5", A.EXEMPT),
    (["fd00::/8"], "fe80::1%eth0", A.CLIENT_REFUSED),  # a scoped link-local address parses, outside the network
    (["fe80::/10"], "fe80::1%eth0", A.EXEMPT),
    ([], "not-an-address", A.CLIENT_REFUSED),  # never exempt, still counted
])
def test_exempt_networks(exempt, address, expected):
    state = limits(per_client=1, exempt=exempt)
    state.admit(address)
    assert state.admit(address) == expected


def test_no_address_and_no_per_client_limit_are_exempt():
    assert limits().admit(None) == A.EXEMPT  # a unix socket's peer
    assert [limits(per_client=0).admit("10.0.0.1") for _ in range(3)] == [A.EXEMPT] * 3


def test_the_total_counts_every_connection_refused_or_not_and_refuses_past_it():
    state = limits(per_client=1, total=3)  # too small to keep a reserve for exempt addresses, or to be pressed
    state.exempt_reserve = 0
    assert [state.admit(a) for a in ("10.0.0.1", "10.0.0.1", "127.0.0.1")] == [A.ADMITTED, A.CLIENT_REFUSED,
                                                                                 A.EXEMPT]
    assert state.admit("10.0.0.9") == A.TOTAL_REFUSED
    assert state.admit("127.0.0.1") == A.TOTAL_REFUSED, "exempt addresses count against the total"
    state.release("10.0.0.9", A.TOTAL_REFUSED)
    state.release("127.0.0.1", A.TOTAL_REFUSED)
    state.release("10.0.0.1", A.CLIENT_REFUSED)
    assert state.admit("10.0.0.9") == A.ADMITTED


@given(st.lists(st.tuples(st.sampled_from(["10.0.0.1", "10.0.0.2", "127.0.0.1", None]), st.booleans()),
                max_size=200))
def test_releasing_every_connection_leaves_nothing_counted(steps):
    """Any order of opening and closing: the counts never go negative, never pass the limits, and end at zero."""
    state = limits(per_client=3, total=20)
    open_: list[tuple[str | None, Admission]] = []
    for address, opens in steps:
        if opens or not open_:
            open_.append((address, state.admit(address)))
        else:
            state.release(*open_.pop(len(open_) // 2))
        assert all(0 < n <= 3 for n in state.by_client.values())
        assert all(0 < n <= MAX_REFUSALS_LINGERING for n in state.refusing.values())
        served = sum(1 for _, admission in open_ if admission in (A.ADMITTED, A.EXEMPT))
        assert state.held == len(open_) and served <= 20
    for address, admission in open_:
        state.release(address, admission)
    assert (state.held, state.by_client, state.refusing) == (0, {}, {})


@pytest.mark.parametrize(("peername", "expected"), [
    (("10.0.0.1", 5000), "10.0.0.1"), (("::1", 5000, 0, 0), "::1"), ("", None), (None, None), (b"\0abstract", None),
])
def test_client_address(peername, expected):
    assert client_address(peername) == expected


@pytest.mark.parametrize(("descriptors", "total"), [(20_000, 9_488), (1024, 384), (4096, 1536), (256, 96),
                                                     (1 << 20, MAX_DEFAULT_TOTAL), (8, 3)])
def test_the_default_total_keeps_descriptors_for_the_store_and_one_upstream_a_call(descriptors, total):
    assert default_total(descriptors) == total
    assert 2 * total + min(1024, descriptors // 4) <= descriptors


def test_under_pressure_an_address_holds_only_a_few_and_its_refusals_do_not_linger():
    state = limits(per_client=100, total=100, exempt=[])
    assert [state.admit("10.0.0.1") for _ in range(75)] == [A.ADMITTED] * 75  # 75 of 100: not yet pressed
    assert state.admit("10.0.0.1") == A.CLIENT_CLOSED, "past 3/4 of the total an address holding 8 or more is refused"
    state.release("10.0.0.1", A.CLIENT_CLOSED)
    assert [state.admit("10.0.0.2") for _ in range(PRESSED_PER_CLIENT + 1)] == \
        [A.ADMITTED] * PRESSED_PER_CLIENT + [A.CLIENT_CLOSED], "a new address still gets a few"
    assert state.refusing == {}


def test_the_last_of_the_total_is_kept_for_exempt_addresses():
    state = limits(per_client=0, total=64)  # loopback exempt: 64 // 16 = 4 kept for it
    assert state.exempt_reserve == 4
    assert [state.admit(f"10.0.0.{i}") for i in range(61)] == [A.EXEMPT] * 60 + [A.TOTAL_REFUSED]
    state.release("10.0.0.60", A.TOTAL_REFUSED)  # closed at once
    assert [state.admit("127.0.0.1") for _ in range(5)] == [A.EXEMPT] * 4 + [A.TOTAL_REFUSED]


def test_raising_the_descriptor_limit_goes_to_the_hard_limit(monkeypatch):
    calls = []
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 65536))
    monkeypatch.setattr(resource, "setrlimit", lambda _, value: calls.append(value))
    assert raise_descriptor_limit() == 65536
    assert calls == [(65536, 65536)]
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, resource.RLIM_INFINITY))
    assert raise_descriptor_limit(ceiling=4096) == 4096
    monkeypatch.setattr(resource, "getrlimit", lambda _: (70000, 70000))
    assert raise_descriptor_limit() == 70000 and len(calls) == 2, "already there: nothing set"


@pytest.mark.parametrize("error", [ValueError("current limit exceeds maximum limit"), PermissionError(1, "EPERM")])
def test_a_system_that_refuses_a_higher_descriptor_limit_keeps_the_one_it_has(monkeypatch, caplog, error):
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, resource.RLIM_INFINITY))

    def refuse(*_):
        raise error

    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert raise_descriptor_limit() == 256
    assert "could not raise the file-descriptor limit from 256" in caplog.text


def test_the_build_reads_the_default_total_from_the_process(monkeypatch):
    monkeypatch.setattr(connection_limits, "default_total", lambda: 777)
    assert ConnectionLimits.build(5, None, []).total == 777
    assert ConnectionLimits.build(5, 9, []).total == 9


def test_an_exempt_entry_that_is_not_a_network_is_an_error_naming_it():
    with pytest.raises(ValidationError, match="'10.0.0.0/33' is not an IP network"):
        GatewayConfig(connection_limit_exempt=["10.0.0.0/33"])
    assert GatewayConfig(connection_limit_exempt=["10.0.0.1"]).connection_limit_exempt == ["10.0.0.1"]
