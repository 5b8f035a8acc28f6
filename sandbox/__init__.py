"""A hardened bubblewrap sandbox: build the command line (pure), run commands in it (effectful).

Imports nothing of ours.
The public API is re-exported here; see README.md.
"""

from sandbox.argv import build_argv
from sandbox.errors import SandboxError
from sandbox.probe import ensure_available, sandbox_problem
from sandbox.run import CommandResult, grant, kill, run_command, run_in_container, start, terminate
from sandbox.spec import (
    NETWORK_ALLOWED_MESSAGE,
    NOBODY,
    GatewayRoute,
    Limits,
    Network,
    SandboxSpec,
)

__all__ = ["NETWORK_ALLOWED_MESSAGE", "NOBODY", "CommandResult", "GatewayRoute", "Limits", "Network", "SandboxError",
           "SandboxSpec", "build_argv", "ensure_available", "grant", "kill", "run_command", "run_in_container",
           "sandbox_problem", "start", "terminate"]
