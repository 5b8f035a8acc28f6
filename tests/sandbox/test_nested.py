"""A sandbox inside a sandbox (a harness sandboxing its agent's commands): as itself, no network, no way out."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest

from sandbox import run_command
from sandbox.paths import sandbox_package_dir
from tests.sandbox.support import python_spec

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="starts the outer sandbox as root")

OUTER = """
import json, os, sys
from pathlib import Path
from sandbox import SandboxSpec, run_command
from sandbox.paths import interpreter_paths
repo = Path.cwd() / "repo"
repo.mkdir()
Path("harness-only.txt").write_text("trajectory")
spec = SandboxSpec(writable=repo, uid=os.getuid(), gid=os.getgid(), readonly=interpreter_paths())
inner = run_command(spec, ["/bin/sh", "-c", sys.argv[1]], 20)
print(json.dumps({"output": inner.output, "returncode": inner.returncode, "outer_alive": True}))
"""

ATTACK = ("id -u; cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep OUTER_SECRET; "
          "echo x > ../harness-only.txt; echo x > ../new.txt; kill -9 -1; "
          "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 18080), timeout=1)' 2>/dev/null"
          " || echo no-network; unshare -r true 2>/dev/null || echo no-userns; echo inner-done")


def test_harness_sandboxes_its_commands_as_itself(tmp_path):
    spec = python_spec(tmp_path)
    spec = dataclasses.replace(spec, readonly=(*spec.readonly, sandbox_package_dir()),
                               env={**spec.env, "PYTHONPATH": str(sandbox_package_dir().parent),
                                    "OUTER_SECRET": "rollout-key-42"})
    result = run_command(spec, [sys.executable, "-c", OUTER, ATTACK], 30)
    assert result.returncode == 0, result.output
    report = json.loads(result.output.splitlines()[-1])
    inner = report["output"]
    assert inner.split()[0] == str(spec.uid)
    assert "rollout-key-42" not in inner
    assert {"no-network", "no-userns", "inner-done"} <= set(inner.split())
    assert report["outer_alive"]  # kill -9 -1 inside did not reach the harness
    assert (spec.writable / "harness-only.txt").read_text() == "trajectory"
    assert not (spec.writable / "new.txt").exists()
