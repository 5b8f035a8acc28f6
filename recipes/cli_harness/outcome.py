"""How a CLI run ended, classified as mini-swe-agent's harness reports it (pure).

mini-swe-agent's harness exits 0 when the agent stopped on its own or ran out of steps (the rollout is graded) and
fails otherwise: an error exit (an agent failure, or an infra failure when the gateway's last answer was 502/503/504:
`controller/outcomes.py` decides from the recorded calls) or a death by signal (the runner sees a crash). The CLI
harness keeps that: the CLI's own exit status passes through, `error_max_turns` (Claude Code's step limit) is a normal
end, and a CLI killed by signal N makes the harness exit 128 + N, which the local runner reports as a crash. A run
past the attempt's deadline is the runner's to stop (timed out, as for mini-swe-agent).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SIGNAL_EXIT_BASE = 128


@dataclass(frozen=True)
class CliOutcome:
    """The harness's verdict on one CLI run."""

    exit_status: str  # "Completed", "LimitsExceeded", "Error" or "KilledBySignal"
    exit_code: int  # the harness's own exit code
    details: dict[str, Any]  # what the CLI reported (turns, stop reason, error), for the summary line


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last line of `text` that is a JSON object (Claude Code's result; Codex's last JSONL event)."""
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def claude_details(stdout: str) -> dict[str, Any]:
    """The fields of Claude Code's `--output-format json` result worth a summary."""
    result = last_json_object(stdout) or {}
    keys = ("subtype", "is_error", "num_turns", "stop_reason", "terminal_reason", "api_error_status")
    return {key: result[key] for key in keys if key in result}


def codex_details(stdout: str) -> dict[str, Any]:
    """The last event of `codex exec --json` and how many commands it ran."""
    events = [event for line in stdout.splitlines() if (event := _json_line(line)) is not None]
    commands = sum(1 for e in events if e.get("type") == "item.completed"
                   and (e.get("item") or {}).get("type") == "command_execution")
    last = events[-1] if events else {}
    return {"last_event": last.get("type"), "commands": commands,
            **({"error": str(last["error"])[:500]} if "error" in last else {})}


def _json_line(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def classify(cli: str, returncode: int, stdout: str) -> CliOutcome:
    """The outcome of a CLI that ended with `returncode` (negative: killed by that signal) and printed `stdout`."""
    details = claude_details(stdout) if cli == "claude-code" else codex_details(stdout)
    if returncode < 0:
        return CliOutcome("KilledBySignal", SIGNAL_EXIT_BASE - returncode, {**details, "signal": -returncode})
    if details.get("subtype") == "error_max_turns":
        return CliOutcome("LimitsExceeded", 0, details)
    if returncode == 0:
        return CliOutcome("Completed", 0, details)
    return CliOutcome("Error", returncode, details)
