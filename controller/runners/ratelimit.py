"""A token bucket: at most `burst` actions back to back, refilled at `rate_per_s`."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """Rate limit on actions (Job creations); `clock` is injectable for tests."""

    def __init__(self, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError(f"need rate_per_s > 0 and burst >= 1, got rate_per_s={rate_per_s}, burst={burst}")
        self.rate_per_s, self.burst, self._clock = rate_per_s, burst, clock
        self._tokens = float(burst)
        self._at = clock()

    def available(self) -> int:
        """Whole actions allowed now."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate_per_s)
        self._at = now
        return int(self._tokens)

    def take(self) -> bool:
        """Spend one token if there is one."""
        if self.available() < 1:
            return False
        self._tokens -= 1.0
        return True
