"""The pooled HTTP clients to engines, with retries of transient failures (connection errors, 502/503/504, 429):
unary calls to an http:// engine through the lean `gateway.http1` pool, streams and https engines through aiohttp."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from gateway.http1 import Http1Pool, UpstreamConnectionError, UpstreamPayloadError

RETRY_STATUSES = frozenset({429, 502, 503, 504})
TRANSIENT_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError,
                    UpstreamConnectionError, UpstreamPayloadError)
CONNECT_TIMEOUT_S = 10.0
JSON_HEADERS = {"content-type": "application/json"}


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one upstream call."""

    attempts: int
    backoff_s: float
    budget_s: float


def answer_timed_out(error: BaseException) -> bool:
    """Whether `error` is the answer taking longer than the client's total timeout (not a failed connection: a
    connect timeout is an `aiohttp.ClientConnectionError` or an `UpstreamConnectionError`)."""
    return isinstance(error, asyncio.TimeoutError) and not isinstance(error, (aiohttp.ClientConnectionError,
                                                                              UpstreamConnectionError))


class UpstreamFailed(Exception):
    """Retries exhausted; `status` is the last upstream status (0 when it never answered); `timed_out` when the last
    try was cut by the total timeout (the engine was still answering: `answer_timed_out`); not `retryable` when the
    client could not make the call at all (the message names the fix)."""

    def __init__(self, message: str, status: int = 0, body: bytes | None = None, *, timed_out: bool = False,
                 retryable: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.timed_out = timed_out
        self.retryable = retryable


class AnswerRefused(Exception):  # noqa: N818 (a refusal, not an error of the engine's)
    """The caller's `charge` refused the answer as it arrived (`error`: its refusal): the read stopped, nothing is
    retried."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Upstream:
    """The clients shared by all calls: the lean pool for unary http calls, one aiohttp session for the rest."""

    def __init__(self, timeout_s: float, retry: RetryPolicy) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60, ttl_dns_cache=300),
            timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=CONNECT_TIMEOUT_S),
            skip_auto_headers=("User-Agent",),
        )
        self._pool = Http1Pool(connect_timeout_s=CONNECT_TIMEOUT_S, answer_timeout_s=timeout_s)
        self._retry = retry

    async def close(self) -> None:
        """Release pooled connections."""
        self._pool.close()
        await self._session.close()

    async def request(self, url: str, body: bytes,
                      charge: Callable[[int], None] | None = None) -> tuple[int, str | None, bytes]:
        """POST and read the whole answer: (status, X-Policy-Version header, body). Transient failures are retried.
        `charge` is told each piece of the answer as it arrives; it refuses by raising `AnswerRefused`, which ends
        the call."""
        if url.startswith("http://"):
            return await self._retrying(url, lambda: self._lean_once(url, body, charge))

        async def once() -> tuple[int, str | None, bytes]:
            async with self._session.post(url, data=body, headers=JSON_HEADERS) as response:
                payload = await _read_charged(response, charge)
                if response.status in RETRY_STATUSES:
                    raise _RetryableStatus(response.status, payload)
                return response.status, response.headers.get("x-policy-version"), payload

        return await self._retrying(url, once)

    async def _lean_once(self, url: str, body: bytes,
                         charge: Callable[[int], None] | None) -> tuple[int, str | None, bytes]:
        answer = await self._pool.post(url, body, charge=charge)  # the pool times the answer out (TimeoutError)
        if answer.status in RETRY_STATUSES:
            raise _RetryableStatus(answer.status, answer.body)
        return answer.status, answer.headers.get("x-policy-version"), answer.body

    async def open_stream(self, url: str, body: bytes) -> aiohttp.ClientResponse:
        """POST and return the response once its status is final; the caller reads and releases it. The body of an
        answer other than 200 (an error, not a stream) is read here, where a failure to read it is retried."""

        async def once() -> aiohttp.ClientResponse:
            response = await self._session.post(url, data=body, headers=JSON_HEADERS)
            if response.status != 200:
                try:
                    payload = await response.read()  # kept by the response: the caller's read() returns it
                except BaseException:
                    response.release()
                    raise
                if response.status in RETRY_STATUSES:
                    response.release()
                    raise _RetryableStatus(response.status, payload)
            return response

        return await self._retrying(url, once)

    async def _retrying(self, url: str, once):
        deadline = time.monotonic() + self._retry.budget_s
        last_error, last_status, last_body, tries, timed_out = "no attempt made", 0, None, 0, False
        for attempt in range(self._retry.attempts):
            if attempt:
                delay = self._retry.backoff_s * 2 ** (attempt - 1)
                if time.monotonic() + delay > deadline:
                    break
                await asyncio.sleep(delay)
            tries += 1
            try:
                return await once()
            except AnswerRefused:
                raise
            except _RetryableStatus as exc:
                last_error, last_status, last_body, timed_out = f"HTTP {exc.status}", exc.status, exc.body, False
            except TRANSIENT_ERRORS as exc:
                last_error, last_status, last_body = f"{type(exc).__name__}: {exc}", 0, None
                timed_out = answer_timed_out(exc)
            except Exception as exc:  # anything else the client raises (an invalid URL, a host it cannot encode):
                raise UpstreamFailed(f"upstream {url} could not be called: {type(exc).__name__}: {exc}; the "
                                     "model's base_url is wrong: register the engine's OpenAI base URL again "
                                     "(POST /v1/admin/models)", retryable=False) from exc  # trying again won't help
        raise UpstreamFailed(f"upstream {url} failed after {tries} tries: {last_error}", last_status, last_body,
                             timed_out=timed_out)


async def _read_charged(response: aiohttp.ClientResponse, charge: Callable[[int], None] | None) -> bytes:
    if charge is None:
        return await response.read()
    pieces = []
    async for piece in response.content.iter_any():
        charge(len(piece))
        pieces.append(piece)
    return b"".join(pieces)


async def read_refused(response: aiohttp.ClientResponse) -> bytes:
    """What can be read of the rest of an answer the gateway refuses anyway (it broke the protocol): its body, or
    b"" when the engine broke off while it was read (recorded as the refused answer's body)."""
    try:
        return await response.read()
    except (*TRANSIENT_ERRORS, aiohttp.ClientError):
        return b""


class _RetryableStatus(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
