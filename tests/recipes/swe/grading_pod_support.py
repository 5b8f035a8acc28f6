"""Running the `swe` grading pod's entry point on this machine as the cluster would: the init container's `unpack`
as the caller, the grading container's `run` as an unprivileged user (nobody, through `setpriv`, when the tests run
as root; the caller otherwise) in a scratch directory where the checkout is not writable and only `tmp/` is.

When the tests run as root from an interpreter that nobody cannot execute (a pyenv build under /root, mode 0700),
`nobody_python` makes a venv of the same-version system interpreter (/usr/bin/python3.X, world-readable) whose
`.pth` adds this checkout and the test interpreter's site-packages: the pod's command runs unchanged, as nobody.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from recipes.swe.grading_job import NONCE_ENV, POD_MODULE

NOBODY = 65534
REPO_ROOT = Path(__file__).resolve().parents[3]


def _runs_as_nobody(python: str) -> bool:
    probe = [*as_nobody(), python, "-I", "-B", "-c",
             "import subprocess, sys; import recipes.swe.grading_job_pod, pytest; "
             "subprocess.run([sys.executable, '-c', '0'], check=True)"]
    return subprocess.run(probe, cwd="/", capture_output=True, timeout=60).returncode == 0


def as_nobody() -> list[str]:
    """The prefix that runs a command as nobody (empty when the tests are not root: they are unprivileged already)."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.fixture(scope="session")
def nobody_python() -> str:
    """An interpreter nobody can run, with pytest and this checkout importable (made once per session)."""
    python = _nobody_python()
    if python is None:
        pytest.skip("running as root, and neither setpriv nor a world-readable python3.X is here to run the grading "
                    "pod as nobody")
    return python


@functools.cache
def _nobody_python() -> str | None:
    if os.geteuid() != 0 or _runs_as_nobody(sys.executable):
        return sys.executable
    system = shutil.which(f"python{sys.version_info.major}.{sys.version_info.minor}", path="/usr/bin:/bin")
    if system is None or shutil.which("setpriv") is None:
        return None
    venv = Path(tempfile.mkdtemp(prefix="harnessrl-nobody-venv-"))
    subprocess.run([system, "-m", "venv", "--without-pip", "--clear", str(venv)], check=True, timeout=120)
    site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    (site / "harnessrl-tests.pth").write_text(f"{REPO_ROOT}\n{sysconfig.get_paths()['purelib']}\n")
    subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    assert _runs_as_nobody(python), "the nobody venv cannot import the grading pod's modules"
    return python


@pytest.fixture
def pod_dir() -> Iterator[Path]:
    """A scratch directory nobody can enter (pytest's tmp_path is 0700 under root)."""
    path = Path(tempfile.mkdtemp(prefix="harnessrl-pod-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_pod(files: Mapping[str, bytes], pod_dir: Path, python: str, nonce: str, timeout_s: float = 120) -> str:
    """Lay out the Secret's files, unpack as the caller, run as nobody; the grading container's log (stdout)."""
    grade, checkout, tmp = pod_dir / "grade", pod_dir / "checkout", pod_dir / "tmp"
    pod_dir.mkdir(mode=0o755, exist_ok=True)
    grade.mkdir()
    for key, data in files.items():
        (grade / key).write_bytes(data)
        (grade / key).chmod(0o444)
    grade.chmod(0o555)
    entry = ["-I", "-B", "-m", POD_MODULE]
    subprocess.run([sys.executable, *entry, "unpack", str(grade), str(checkout)], check=True, timeout=60, cwd="/")
    subprocess.run(["chmod", "-R", "a+rX,go-w", str(checkout)], check=True)
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(checkout)], check=True)
    tmp.mkdir(mode=0o777)
    tmp.chmod(0o777)
    done = subprocess.run([*as_nobody(), python, *entry, "run", str(grade), str(checkout), str(tmp)], cwd="/",
                          env={"PATH": "/usr/bin:/bin", NONCE_ENV: nonce}, capture_output=True, text=True,
                          timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
