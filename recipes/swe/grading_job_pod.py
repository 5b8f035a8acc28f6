"""The `swe` grading pod's entry point (`python -I -B -m recipes.swe.grading_job_pod`), in the project's image.

- `unpack GRADE CHECKOUT` (the init container): the graded checkout from GRADE/repo.tar.gz into CHECKOUT (tarfile's
  `data` filter: no absolute paths, no links leaving the tree, no devices). No tested code runs in it.
- `run GRADE CHECKOUT TMP` (the grading container, PID 1; CHECKOUT is mounted read-only there, TMP is the only
  writable place): the tests run in `testrun`'s canary rounds (`canaries`; the roles drawn here, in this
  non-dumpable process), one after the other, each on a read-only copy of the checkout in TMP with its lines placed,
  with `testrun`'s isolated launcher started directly (the pod is the sandbox, so no bubblewrap:
  `run_launcher_directly`) and a share of the time limit (timeout_s / rounds: the Job's deadline is unchanged);
  between rounds every process is killed and TMP (and, as PID 1, /dev/shm) emptied, so no round leaves anything for
  the next. Then ONE line goes to the pod's log: VERDICT_PREFIX + a JSON object with the nonce (from the container's
  environment) and, per round, pytest's exit status, whether it timed out, the raw outcomes document (base64), the
  output's tail and each graded test's role (round 1's repeated at the top level). The controller judges it
  (`kube_grading_swe.read_verdict`, merging the rounds as `testrun.merge_rounds` does locally).

Why the tested code cannot write the verdict: it runs in a child whose stdout/stderr go to a file in TMP and which
inherits no descriptor of the log; this process is made non-dumpable before the child starts, so the same uid cannot
open /proc/1/fd/1, read /proc/1/environ (the nonce) or ptrace it; as PID 1 of the pod's PID namespace it ignores
signals it has no handler for (SIGKILL and SIGTERM from inside the pod included); after each round every process left
in the pod is killed (`kill(-1)`). What remains: with the boundary's files in the input (every Job but a forgery
probe's), the repository's modules run behind the process boundary as locally; in a forgery probe's Job
(`forgery_probe`) they run inside pytest's process, where they can rewrite the outcomes as under bubblewrap (the
canary rounds, the patch policy, the sentinel pair and the exit-status check name it there; a probe never raises a
reward; what still escapes is recipes/README.md's "Residual risk of the SWE verdict"); a round runs as the same uid
as this process, and its copy in TMP is read-only only until its owner changes the mode back (as good as reading it,
which the tests can anyway); the output tail it can rewrite (diagnostics only).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import importlib.util
import json
import os
import random
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

from recipes.swe.canaries import plan_rounds, role_of, unguarded
from recipes.swe.grading_job import GRADE_TOKEN, NONCE_ENV, REPO_ARCHIVE, REPO_TOKEN, RUN_FILE
from recipes.swe.testrun import (
    GRADING_LIMITS,
    LAUNCHER,
    OUTPUT_TAIL_LINES,
    VERDICT_ROUNDS,
    WANTED_FILE,
    _drain,
    _tail,
    write_round,
)

VERDICT_PREFIX = "harnessrl-swe-verdict "  # the one log line the controller reads
CHILD_PATH = "/usr/local/bin:/usr/bin:/bin"
PR_SET_DUMPABLE = 4
PIPE_GRACE_S = 5.0  # how long the outcomes pipe may stay open after pytest exited
SHARED_MEMORY = Path("/dev/shm")  # the pod's own tmpfs, writable by the tests: wiped between rounds when PID 1


def unpack(archive: Path, checkout: Path) -> Path:
    """Extract the packed checkout into `checkout` (created), refusing what leaves the tree."""
    checkout.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as packed:
        packed.extractall(checkout, filter="data")
    return checkout


def fill(arg: str, checkout: Path, grade: Path) -> str:
    """A run.json argument with the pod's directories in place of their tokens."""
    return arg.replace(REPO_TOKEN, str(checkout)).replace(GRADE_TOKEN, str(grade))


def harden() -> None:
    """Nothing of this process is reachable through /proc or ptrace by the same uid; default signal handling (so, as
    a PID namespace's init, signals from inside are ignored)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed: the verdict could be forged")
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _limit_child() -> None:
    """In the child before exec: no core files, and the grading limits on file size and CPU time."""
    for which, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, GRADING_LIMITS.file_bytes),
                         (resource.RLIMIT_CPU, GRADING_LIMITS.cpu_s)):
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def run_launcher_directly(checkout: Path, grade: Path, tmp: Path, pytest_args: list[str],
                          timeout_s: float) -> tuple[str, int, bool, bytes]:
    """`testrun`'s launcher (`python -I -B`, the grader's plugin from `grade`) in `checkout`, without a sandbox of its
    own: (output tail, exit status, timed out, what the outcomes pipe got). Every process it leaves is killed."""
    wanted = grade / WANTED_FILE
    read_fd, write_fd = os.pipe()
    argv = [sys.executable, "-I", "-B", "-c", LAUNCHER, str(grade / "plugin.py"), str(write_fd), str(wanted),
            *pytest_args]
    env = {"PATH": CHILD_PATH, "HOME": str(tmp), "TMPDIR": str(tmp), "LANG": "C.UTF-8",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    output_path = tmp / "pytest-output.log"
    with output_path.open("wb") as sink:
        try:
            process = subprocess.Popen(argv, cwd=checkout, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                       stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True,
                                       preexec_fn=_limit_child)
        finally:
            os.close(write_fd)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(read_fd, chunks), daemon=True)
    reader.start()
    try:
        process.wait(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    _kill_everything(process)
    reader.join(timeout=PIPE_GRACE_S)
    tail = "\n".join(_tail(output_path).splitlines()[-OUTPUT_TAIL_LINES:])
    return tail, (-9 if timed_out else process.returncode), timed_out, b"".join(chunks)


def _kill_everything(process: subprocess.Popen) -> None:
    """SIGKILL the run's session and, as the pod's PID 1, every other process in the pod; reap them."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if os.getpid() == 1:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
    process.wait()
    if os.getpid() == 1:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass


def verdict_line(nonce: str, returncode: int, timed_out: bool, document: bytes, tail: str,
                 infra: str | None = None, rounds: list[dict[str, Any]] | None = None) -> str:
    """The log line the controller reads (one line: JSON escapes every newline); `infra` says why no test could run
    (the image's fault, not the attempt's); `rounds`, the canary rounds (`round_record`), the first of which the
    other fields repeat."""
    return VERDICT_PREFIX + json.dumps({"nonce": nonce, "returncode": returncode, "timed_out": timed_out,
                                        "document": base64.b64encode(document).decode(), "output_tail": tail,
                                        "infra": infra, **({"rounds": rounds} if rounds is not None else {})})


def round_record(returncode: int, timed_out: bool, document: bytes, tail: str, roles: dict[str, str]) -> dict:
    """One canary round in the verdict: what `run_launcher_directly` returned and each graded test's role."""
    return {"returncode": returncode, "timed_out": timed_out, "document": base64.b64encode(document).decode(),
            "output_tail": tail, "roles": roles}


def run(grade: Path, checkout: Path, tmp: Path, nonce: str) -> str:
    """Run the packed tests in canary rounds, one after the other, each on a copy of the checkout in `tmp` that
    nothing of an earlier round reaches (`wipe`); the verdict line."""
    harden()
    if importlib.util.find_spec("pytest") is None:
        return verdict_line(nonce, -1, False, b"", "", infra=f"pytest is not installed for {sys.executable} in the "
                            "grading image; install it in the image the controller's `kubernetes.image` names")
    spec = json.loads((grade / RUN_FILE).read_text(encoding="utf-8"))
    test_ids = json.loads((grade / WANTED_FILE).read_text(encoding="utf-8"))
    plans = plan_rounds(test_ids, VERDICT_ROUNDS, random.SystemRandom())
    rounds = []
    for index, plan in enumerate(plans):
        if index:
            wipe(tmp)
        copy = tmp / secrets.token_hex(6) / checkout.name
        placed = write_round(checkout, copy, plan)
        _read_only(copy)
        args = [fill(arg, copy, grade) for arg in spec["pytest_args"]]
        tail, returncode, timed_out, document = run_launcher_directly(copy, grade, tmp, args,
                                                                      float(spec["timeout_s"]) / len(plans))
        roles = {test_id: role_of(plan, test_id, unguarded(plan, placed)) for test_id in test_ids}
        rounds.append(round_record(returncode, timed_out, document, tail, roles))
    first = rounds[0]
    return verdict_line(nonce, first["returncode"], first["timed_out"], base64.b64decode(first["document"]),
                        first["output_tail"], rounds=rounds)


def _read_only(tree: Path) -> None:
    """Files and folders of `tree` not writable (as the checkout's read-only mount; its owner could undo it)."""
    for path in [tree, *tree.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)


def wipe(tmp: Path) -> None:
    """Empty `tmp` (and, as the pod's PID 1, the pod's own /dev/shm) of everything a round left, read-only folders
    included: a later round cannot read what an earlier one wrote."""
    places = [tmp, *([SHARED_MEMORY] if os.getpid() == 1 and SHARED_MEMORY.is_dir() else [])]
    for place in places:
        for entry in list(place.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, onerror=_writable_then_retry)
            else:
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()


def _writable_then_retry(function: Any, path: str, error: Any) -> None:
    """rmtree's error handler: make the parent (and the path) writable and searchable, then retry once."""
    for target in (os.path.dirname(path), path):
        with contextlib.suppress(OSError):
            if not os.path.islink(target):
                os.chmod(target, 0o700)
    with contextlib.suppress(FileNotFoundError):
        function(path)


def main(argv: list[str]) -> int:
    """`unpack GRADE CHECKOUT` or `run GRADE CHECKOUT TMP`."""
    if len(argv) == 3 and argv[0] == "unpack":
        unpack(Path(argv[1]) / REPO_ARCHIVE, Path(argv[2]))
        return 0
    if len(argv) == 4 and argv[0] == "run":
        nonce = os.environ.pop(NONCE_ENV, "")
        print(run(Path(argv[1]), Path(argv[2]), Path(argv[3]), nonce), flush=True)
        return 0
    print(f"usage: python -m {__spec__.name if __spec__ else 'grading_job_pod'} unpack GRADE CHECKOUT | "
          "run GRADE CHECKOUT TMP", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
