"""The pod side of the workdir transfer: two stdlib-only `python -c` programs the agent Job runs (no curl needed).

Both find the gateway from the harness contract: the artifact URL is `$OPENAI_BASE_URL` without its `/v1`, plus
`/artifacts/<name>`, authorised by `$OPENAI_API_KEY` (the rollout key may touch only its own rollout).
- `FETCH_PROGRAM DIR NAME`: download the artifact and extract it into DIR (tarfile's "data" filter); any failure
  exits non-zero, so the init container fails and the attempt counts as a start failure (infra, retried).
- `RUN_AND_RETURN_PROGRAM DIR NAME CMD...`: run CMD, then pack DIR and PUT it as the artifact, and exit with CMD's
  exit code (128+N when CMD died from signal N, as a shell reports it; 127 when CMD cannot start, with
  NOT_STARTED_MARK written to the container's termination message so the runner counts it as a start failure, i.e.
  infra, not as the harness's own exit 127). Once CMD ran, the wrapper (as the container's PID 1) kills what it left
  running and empties the termination message: a harness that wrote NOT_STARTED_MARK there itself (to turn its own
  failure into an infra retry) leaves nothing. SIGTERM is passed on to CMD. A failed upload is reported on stderr and
  does not change the exit code.
"""

from __future__ import annotations

NOT_STARTED_MARK = "harnessrl: the harness command could not start"

FETCH_PROGRAM = """\
import io, os, sys, tarfile, urllib.request
target, name = sys.argv[1], sys.argv[2]
url = os.environ["OPENAI_BASE_URL"].rstrip("/").removesuffix("/v1") + "/artifacts/" + name
request = urllib.request.Request(url, headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
with urllib.request.urlopen(request, timeout=300) as response:
    data = response.read()
with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
    archive.extractall(target, filter="data")
print(f"[harnessrl] {name}: {len(data)} bytes extracted into {target}", file=sys.stderr)
"""

RUN_AND_RETURN_PROGRAM = """\
import ctypes, io, os, signal, subprocess, sys, tarfile, urllib.request
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the agent's commands (same uid) cannot read our environ
target, name, command = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    child = subprocess.Popen(command)
except OSError as exc:
    print(f"[harnessrl] cannot start {command!r}: {exc}", file=sys.stderr)
    try:
        with open(os.environ.get("HARNESSRL_TERMINATION_LOG", "/dev/termination-log"), "w") as log:
            log.write(f"__NOT_STARTED_MARK__: {command!r}: {exc}")
    except OSError:
        pass
    code = 127
else:
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    code = child.wait()
    code = 128 - code if code < 0 else code
    if os.getpid() == 1:  # the container's init: end what the harness left running (kill(-1) spares PID 1)
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    try:  # the harness ran: anything it wrote to the termination message is not the wrapper's word
        open(os.environ.get("HARNESSRL_TERMINATION_LOG", "/dev/termination-log"), "w").close()
    except OSError:
        pass
try:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for entry in sorted(os.listdir(target)):
            archive.add(os.path.join(target, entry), arcname=entry)
    url = os.environ["OPENAI_BASE_URL"].rstrip("/").removesuffix("/v1") + "/artifacts/" + name
    request = urllib.request.Request(url, data=buffer.getvalue(), method="PUT", headers={
        "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(request, timeout=300) as response:
        response.read()
except Exception as exc:
    print(f"[harnessrl] could not return {target} as {name}: {exc}", file=sys.stderr)
sys.exit(code)
""".replace("__NOT_STARTED_MARK__", NOT_STARTED_MARK)


def fetch_command(target: str, name: str) -> list[str]:
    """argv of the init container that downloads artifact `name` and extracts it into `target`."""
    return ["python", "-c", FETCH_PROGRAM, target, name]


def run_and_return_command(target: str, name: str, command: list[str]) -> list[str]:
    """argv of the harness container: `command`, then `target` packed and uploaded as artifact `name`."""
    return ["python", "-c", RUN_AND_RETURN_PROGRAM, target, name, *command]
