"""Chat messages the tracking tests put in their recorded calls (rollouts and calls: tests.trainer.loop_support)."""

from __future__ import annotations

SYSTEM = {"role": "system", "content": "You solve tasks."}
USER = {"role": "user", "content": "Fix the bug."}
