"""The pod side of a per-rollout sandbox: the keep-alive loop of the `sandbox` container, which runs the commands the
harness container drops into a shared emptyDir (no API token, no `pods/exec`: see deploy/k8s/README.md).

Protocol, per command `ID` (zero-padded, in order) inside the shared directory:
  the harness writes `ID.timeout` (seconds) and `ID.cwd`, then renames `ID.cmd.tmp` to `ID.cmd` (the script);
  the loop runs `bash ID.cmd` in that directory under `timeout -k 5 SECONDS` (the whole process group is
  signalled), output (stdout + stderr) to `ID.out`, then removes `ID.cmd` and renames `ID.rc.tmp` to `ID.rc`
  (the exit status: 124 or 137 after a timeout, 126 when the directory does not exist).
The loop writes `ready` when it starts and exits 0 on SIGTERM (the kubelet stops the native sidecar when the harness
exits; exit 0 keeps it out of the attempt's ending). Only bash, coreutils `timeout`, `cat`, `mv` and `sleep` are
needed from the image (the official SWE-bench images have them).
"""

from __future__ import annotations

SANDBOX_DIR_ENV = "HARNESSRL_SANDBOX_DIR"  # names the shared directory in the harness container
READY_FILE = "ready"
KILL_GRACE_S = 5  # SIGTERM, then SIGKILL this much later

SANDBOX_LOOP = """\
ipc="$1"
trap 'exit 0' TERM INT
mkdir -p "$ipc" && : >"$ipc/__READY__"
while true; do
  for job in "$ipc"/*.cmd; do
    [ -e "$job" ] || continue
    id="${job%.cmd}"
    seconds="$(cat "$id.timeout" 2>/dev/null || echo 60)"
    dir="$(cat "$id.cwd" 2>/dev/null || echo /)"
    ( cd "$dir" 2>/dev/null || { echo "no directory $dir in the sandbox"; exit 126; }
      exec timeout -k __GRACE__ "$seconds" bash "$job" ) >"$id.out" 2>&1 </dev/null &
    wait "$!"
    echo "$?" >"$id.rc.tmp"
    rm -f "$job"
    mv "$id.rc.tmp" "$id.rc"
  done
  sleep 0.05
done
""".replace("__READY__", READY_FILE).replace("__GRACE__", str(KILL_GRACE_S))


def sandbox_command(ipc_dir: str) -> list[str]:
    """argv of the sandbox container: the loop above on `ipc_dir`, in the image's own bash."""
    return ["/bin/bash", "-c", SANDBOX_LOOP, "harnessrl-sandbox", ipc_dir]
