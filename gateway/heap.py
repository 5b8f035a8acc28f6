"""The served gateway's garbage collector, settled once the app is built (`settle`).

Python's cyclic collector scans the young objects every 700 container allocations and, now and then, every object
of the process: the modules, FastAPI's and SQLAlchemy's structures, hundreds of thousands of objects that are never
garbage. A proxied call allocates a few thousand containers (its parsed answer alone: a dict per logprob), so with
64 calls in flight the default collector ran through the call path many times per call. After `settle` the objects
alive at start-up are frozen (kept out of every later scan) and a young collection waits for 10,000 allocations;
a call's own garbage is still freed by reference counting as it goes, cycles by the collector.

Measured A/B against the commit before this one (`benchmarks/gateway_overhead.py --stores sqlite-NORMAL --protocols
chat messages --clients 1 64 --rounds 3 --baseline efbf28c`, benchmarks/README.md): gateway CPU per call at 64
clients, medians of 3 rounds, Messages 0.603 -> 0.411 ms, chat 0.422 -> 0.354 ms; at 1 client unchanged (1.0 ms).
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 50, 100)
"""Allocations before a young collection, young collections before a middle one, middle before a full one (Python's
defaults: 700, 10, 10)."""


def settle(thresholds: tuple[int, int, int] = THRESHOLDS) -> None:
    """Collect what start-up left, freeze every object alive now, and set the collection thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
