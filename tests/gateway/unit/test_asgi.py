"""The raw-ASGI helpers (gateway/asgi.py): a large answer goes out in pieces, so that the server waits for the client
between them."""

from __future__ import annotations

import asyncio

import pytest

from gateway.asgi import PIECE_BYTES, send_bytes


@pytest.mark.parametrize(("size", "pieces"), [(0, 1), (10, 1), (PIECE_BYTES, 1), (PIECE_BYTES + 1, 2),
                                               (3 * PIECE_BYTES, 3), (3 * PIECE_BYTES + 7, 4)])
def test_a_body_goes_out_in_pieces_of_at_most_piece_bytes(size, pieces):
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    asyncio.run(send_bytes(send, 200, body))
    start, *parts = sent
    assert (b"content-length", str(size).encode()) in start["headers"]
    assert len(parts) == pieces and all(len(part["body"]) <= PIECE_BYTES for part in parts)
    assert [part.get("more_body", False) for part in parts] == [True] * (pieces - 1) + [False]
    assert b"".join(bytes(part["body"]) for part in parts) == body
