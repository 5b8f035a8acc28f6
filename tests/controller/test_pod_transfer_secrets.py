"""The agent pod's wrapper (pod_transfer.RUN_AND_RETURN_PROGRAM) holds the rollout key in its environment while the
harness and the agent's commands run beside it as the same unprivileged uid: it makes itself non-dumpable, so they
cannot read the key from /proc/<wrapper>/environ."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from controller.pod_transfer import run_and_return_command

SYSTEM_PYTHON = Path("/usr/bin/python3.11")  # readable by nobody (the venv's interpreter may sit under /root)


@pytest.mark.skipif(not SYSTEM_PYTHON.exists() or os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root, setpriv and /usr/bin/python3.11 to run the wrapper as another uid")
def test_the_agent_cannot_read_the_rollout_key_from_the_wrapper():
    workspace = Path(tempfile.mkdtemp(prefix="harnessrl-pod-"))
    try:
        workspace.chmod(0o777)
        argv = run_and_return_command(str(workspace), "result.tar.gz",
                                      ["sh", "-c", 'cat /proc/$PPID/environ; echo "read=$?"'])
        argv[0] = str(SYSTEM_PYTHON)
        env = {"PATH": "/usr/bin:/bin", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "hrl.secret-key",
               "HARNESSRL_TERMINATION_LOG": str(workspace / "termination-log")}
        result = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *argv],
                                env=env, capture_output=True, text=True, timeout=60)
        assert "read=1" in result.stdout, result.stdout + result.stderr  # the attempt ran and was refused
        assert "hrl.secret-key" not in result.stdout
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
