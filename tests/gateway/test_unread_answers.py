"""An answer the harness does not read holds the gateway neither long nor much, on a real socket to the served
gateway: an unread artifact answer is aborted after the write stall, and while it is held the rollout's next read
waits, then 503 (gateway/http_protocol.py, gateway/artifact_reads.py; each tested on its own in unit/)."""

from __future__ import annotations

import os
import socket
import time
from urllib.parse import urlparse

import httpx
import pytest

from gateway import answer_pace, artifact_reads, drained_close, http_protocol
from tests.gateway.api_support import create_rollouts

SIZE = 24 << 20  # past what the kernel's socket buffers take on loopback: the rest waits in the gateway


def test_an_unread_artifact_answer_is_aborted_after_the_stall_and_holds_the_rollouts_next_read(
        gateway, admin, monkeypatch):
    monkeypatch.setattr(http_protocol, "WRITE_STALL_S", 3.0)
    monkeypatch.setattr(artifact_reads, "READ_WAIT_S", 0.5)
    url, auth, blob = _stored_artifact(admin, SIZE)
    with _requested(url, auth, 4096) as stuck:
        time.sleep(0.5)
        started = time.monotonic()
        busy = httpx.get(url, headers=auth, timeout=30)
        assert busy.status_code == 503 and busy.json()["error"]["code"] == "artifact_reads_busy"
        assert busy.headers["retry-after"] == "1" and time.monotonic() - started < 3.0
        received, aborted = _read_all(stuck, deadline_s=30)
    assert aborted and received < SIZE, "the unread answer was sent whole or never cut"
    got = httpx.get(url, headers=auth, timeout=60)
    assert got.status_code == 200 and got.content == blob, "the rollout reads again once the stuck read ended"


def _stored_artifact(admin, size: int) -> tuple[str, dict[str, str], bytes]:
    """A fresh rollout's artifact of `size` random bytes: (its URL, the rollout's auth header, the bytes)."""
    [created] = create_rollouts(admin)
    blob = os.urandom(size)
    admin.put_artifact(created.id, "blob", blob)
    return (created.base_url.removesuffix("/v1") + "/artifacts/blob",
            {"authorization": f"Bearer {created.api_key}"}, blob)


def _requested(url: str, auth: dict[str, str], window: int, version: bytes = b"HTTP/1.1") -> socket.socket:
    """A socket with a small receive window (set before connecting) that has asked for `url` and read nothing."""
    target = urlparse(url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)
    sock.connect((target.hostname, target.port))
    sock.sendall(b"GET %s %s\r\nhost: x\r\nauthorization: %s\r\n\r\n"
                 % (target.path.encode(), version, auth["authorization"].encode()))
    return sock


def _read_rest(sock: socket.socket, timeout_s: float) -> tuple[int, bool]:
    """(the bytes `sock` still receives, whether the gateway reset it) once the test reads at last."""
    sock.settimeout(timeout_s)
    received = 0
    try:
        while chunk := sock.recv(1 << 20):
            received += len(chunk)
    except ConnectionResetError:
        return received, True
    return received, False


def _read_all(sock: socket.socket, deadline_s: float) -> tuple[int, bool]:
    """Wait (reading nothing) until the gateway has given up, then read what is left: (bytes, cut short)."""
    time.sleep(4.0)  # past the stall: the gateway aborts and drops what it buffered
    received, reset = _read_rest(sock, deadline_s)
    return received, reset or received < SIZE


def test_a_client_reading_an_artifact_slowly_is_dropped_and_one_reading_it_normally_is_served(
        gateway, admin, monkeypatch):
    """A client reading a little now and then was never stalled and kept the read (and its rollout's artifact-read
    slot) as long as it liked; the pace asks 256 KiB/s of what waits on it (gateway/answer_pace.py)."""
    monkeypatch.setattr(answer_pace, "GRACE_S", 1.0)
    url, auth, blob = _stored_artifact(admin, SIZE)
    with _requested(url, auth, 16384) as slow:
        slow.settimeout(30)
        received, started, cut = 0, time.monotonic(), False
        try:
            while time.monotonic() - started < 25 and (chunk := slow.recv(16384)):
                received += len(chunk)
                time.sleep(0.25)  # about 64 KB/s at the most
        except ConnectionResetError:
            cut = True
    assert cut and received < 4 << 20, f"a 64 KB/s reader was not dropped ({received} bytes in 25 s)"
    got = httpx.get(url, headers=auth, timeout=60)
    assert got.status_code == 200 and got.content == blob, "a client reading as it comes is served"


@pytest.mark.parametrize("request_line", [b"HTTP/1.1\r\nconnection: close", b"HTTP/1.0"])
def test_an_answer_left_unread_on_a_closing_connection_is_reset_not_left_to_the_kernel(
        gateway, admin, monkeypatch, request_line):
    """A `Connection: close` or HTTP/1.0 answer never read stayed queued in the kernel for good (the connection
    open, or an orphan outside every limit): now its close waits, then resets (gateway/drained_close.py)."""
    monkeypatch.setattr(drained_close, "GRACE_S", 1.0)
    url, auth, _ = _stored_artifact(admin, 400_000)  # fits the kernel's buffers: never paused
    with _requested(url, auth, 4096, request_line) as unread:
        time.sleep(6.0)  # the close's grace and the size's time at the rate, then a reset
        received, cut = _read_rest(unread, 10)
    assert cut and received < 400_000, f"the unread answer was not reset ({received} bytes read after 6 s)"


def test_a_half_closed_client_that_never_reads_is_reset_not_left_as_an_orphan(gateway, admin, monkeypatch):
    """A client sending its request, then its end (SHUT_WR), and reading nothing: the transport closed itself, the
    answer stayed queued in the kernel as an orphan past every limit (an attack review: 40 of them)."""
    monkeypatch.setattr(drained_close, "GRACE_S", 1.0)
    url, auth, _ = _stored_artifact(admin, 400_000)
    with _requested(url, auth, 4096) as half:
        time.sleep(0.3)
        half.shutdown(socket.SHUT_WR)
        time.sleep(6.0)
        received, cut = _read_rest(half, 10)
    assert cut and received < 400_000, f"the half-closed client's answer was not reset ({received} bytes)"
