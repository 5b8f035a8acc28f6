"""When a Prefect task retries: only after an I/O failure (network, filesystem, a server error, a timeout).

A deterministic error (bad data, a refused value, a checkpoint of another run) fails at once instead of being run
three times; tasks pass `retry_condition_fn=io_failure` beside their `retries`.
"""

from __future__ import annotations

from typing import Any

import httpx
import urllib3.exceptions
from minio.error import MinioException

from gateway.client import GatewayAPIError

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (OSError, httpx.HTTPError, urllib3.exceptions.HTTPError,
                                                     MinioException)
"""Failures worth another attempt (OSError covers connection errors, timeouts and the hub's requests errors)."""


def is_transient(error: BaseException) -> bool:
    """Whether `error` is an I/O failure that may pass on another attempt (a gateway 5xx counts; a 4xx does not)."""
    if isinstance(error, GatewayAPIError):
        return error.status >= 500
    return isinstance(error, TRANSIENT_ERRORS)


def io_failure(_task: Any, _task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: retry when the failed state holds a transient error."""
    error = state.result(raise_on_failure=False)
    return isinstance(error, BaseException) and is_transient(error)
